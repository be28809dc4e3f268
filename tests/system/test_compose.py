"""docker-compose.yml and its Dockerfile, Prometheus and Grafana files, checked without Docker.

No Docker engine runs in CI, so ``docker compose config`` is not available. These tests parse the
files and hold them against the project itself: every service command and its ``CACHEROUTE_*``
variables go through the real entry point (in a subprocess that runs it up to the moment it would
start serving), addresses and ports are cross-checked between services, Prometheus and Grafana,
and the dashboard's queries name metrics that the code defines.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "cacheroute.json"
PROJECT_IMAGE = "cacheroute:local"
ENV_PREFIX = "CACHEROUTE_"
# Entry points that serve /metrics on their --listen port beside their API, as vLLM does.
METRICS_ON_LISTEN = frozenset({"simengine"})
# Ports of the third-party images when their command does not name one.
IMAGE_PORTS = {"redis": 6379, "prom/prometheus": 9090, "grafana/grafana": 3000}
# What the compose file is for (issue 5, item 4): entry point -> number of services running it.
TOPOLOGY = {
    "python -m controlplane": 1,
    "python -m dataplane": 2,
    "python -m simengine": 4,
    "python -m agents": 4,
    "cachectl load": 1,
}
PARSE_TIMEOUT_S = 60.0

# Runs one entry point as its command line would: ``python -c _RUN SPEC`` with SPEC naming a -m
# module or a console script's function and the arguments. With ``dry`` the program runs for real
# up to the moment it would start serving: argparse parses (exit 2 on a bad flag or value), the
# entry point validates what it validates after parsing (engine specs, TLS pairs, workload names),
# and its ``asyncio.run(...)`` (how every CacheRoute process starts) is replaced by a stop that
# prints the options parse_args returned and what the parser accepts.
_RUN = r"""
import argparse, asyncio, importlib, json, runpy, sys

spec = json.loads(sys.argv[1])
parsed = []

class Started(BaseException):
    pass

def plain(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)

if spec["dry"]:
    real_parse_args = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        namespace = real_parse_args(self, args, namespace)
        parsed.append((self, namespace))
        return namespace

    def run(main, *args, **kwargs):
        getattr(main, "close", lambda: None)()  # a coroutine that never runs
        raise Started

    argparse.ArgumentParser.parse_args = parse_args
    asyncio.run = run

sys.argv = [spec["prog"], *spec["args"]]
try:
    if spec["module"]:
        runpy.run_module(spec["module"], run_name="__main__", alter_sys=True)
    else:
        module, _, function = spec["function"].partition(":")
        sys.exit(getattr(importlib.import_module(module), function)())
except Started:
    if not parsed:
        sys.exit("the entry point started without calling ArgumentParser.parse_args")
    parser, namespace = parsed[0]
    options = [a for a in parser._actions if a.option_strings]
    print(json.dumps({
        "values": {k: plain(v) for k, v in vars(namespace).items() if not callable(v)},
        "dests": sorted({a.dest for a in options}),
        "choices": {a.dest: [str(c) for c in a.choices] for a in options if a.choices},
    }))
    sys.exit(0)
except SystemExit as exc:
    if spec["dry"] and exc.code in (0, None):
        sys.exit("the entry point exited 0 without starting")
    raise
if spec["dry"]:
    sys.exit("the entry point returned without starting")
"""

# -- loading --------------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$(?:\$|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: Any, path: str = "") -> Any:
    """Compose's ``${NAME:-default}`` interpolation with an empty environment (the defaults)."""
    if isinstance(value, dict):
        return {k: interpolate(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        body = match.group(1) if match.group(1) is not None else match.group(2)
        found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?-)(.*)", body, re.DOTALL)
        if found is None:
            raise AssertionError(
                f"{path}: ${{{body}}} needs a default (${{NAME:-value}}) so that "
                "`docker compose up` works without a .env file"
            )
        return found.group(3)

    return _VARIABLE.sub(substitute, value)


@cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict), "docker-compose.yml must be a mapping"
    return {k: interpolate(v, k) for k, v in data.items() if not str(k).startswith("x-")}


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict) and found, "docker-compose.yml has no services"
    return found


@cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def wheel_packages() -> list[str]:
    """Top-level import names the project's wheel (and so the image) contains."""
    packages = pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return [Path(p).name for p in packages]


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(str(item).partition("=")[::2] for item in env)
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in env.items()}  # fmt: skip


def argv(name: str, service: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        if value is None:
            continue
        assert isinstance(value, list), f"{name}.{key}: use the exec (list) form"
        parts.extend(str(v) for v in value)
    return parts


def is_project(service: dict[str, Any]) -> bool:
    return "build" in service


def project_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services().items() if is_project(s)}


@dataclass(frozen=True)
class EntryPoint:
    label: str  # "python -m agents", "cachectl load"
    module: str | None  # the -m module, or None for a console script
    function: str | None  # "cachectl.main:main" for a console script
    prog: str
    args: list[str]


def entry_point(name: str, command: list[str]) -> EntryPoint:
    scripts: dict[str, str] = pyproject()["project"].get("scripts", {})
    if command[:2] == ["python", "-m"] and len(command) > 2:
        module = command[2]
        return EntryPoint(f"python -m {module}", module, None, module, command[3:])
    if command and command[0] in scripts:
        words = [command[0]] + [a for a in command[1:2] if not a.startswith("-")]
        return EntryPoint(" ".join(words), None, scripts[command[0]], command[0], command[1:])
    raise AssertionError(
        f"{name}: command {shlex.join(command)!r} is neither `python -m PACKAGE` nor one of the "
        f"project's scripts {sorted(scripts)}"
    )


def entry_points() -> dict[str, EntryPoint]:
    return {name: entry_point(name, argv(name, s)) for name, s in project_services().items()}


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    return {**env, **extra}


@dataclass(frozen=True)
class Parsed:
    values: dict[str, Any]
    dests: list[str]
    choices: dict[str, list[str]]


def run_entry_point(
    point: EntryPoint, args: list[str], env: dict[str, str], *, dry: bool
) -> subprocess.CompletedProcess[str]:
    spec = {"prog": point.prog, "args": args, "module": point.module,
            "function": point.function, "dry": dry}  # fmt: skip
    try:
        return subprocess.run(
            [sys.executable, "-c", _RUN, json.dumps(spec)],
            cwd=ROOT, env=child_env(env), capture_output=True, text=True, check=False,
            timeout=PARSE_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"`{point.label}` {args} did not stop: does it still start with asyncio.run?"
        ) from exc


def dry_parse(point: EntryPoint, env: dict[str, str]) -> Parsed | str:
    """The parsed options, or why the entry point rejects the command and environment."""
    result = run_entry_point(point, point.args, env, dry=True)
    if result.returncode != 0:
        return (
            f"`{point.label}` rejects {shlex.join(point.args)!r} with environment {env}: "
            f"exit {result.returncode}\n{result.stderr[-2000:]}"
        )
    data = json.loads(result.stdout.strip().splitlines()[-1])
    return Parsed(data["values"], data["dests"], data["choices"])


@cache
def dry_parse_all() -> dict[str, Parsed | str]:
    """Every project service's command, through its entry point's parser (in parallel)."""
    points = entry_points()
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {
            name: pool.submit(dry_parse, points[name], environment(s))
            for name, s in project_services().items()
        }
        return {name: future.result() for name, future in futures.items()}


def parsed_services() -> dict[str, Parsed]:
    outcomes = dry_parse_all()
    rejected = sorted(name for name, outcome in outcomes.items() if isinstance(outcome, str))
    assert not rejected, f"cannot check: {rejected} do not parse (see the parser test)"
    return {name: outcome for name, outcome in outcomes.items() if isinstance(outcome, Parsed)}


def split_address(value: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port`` or of a URL; None for anything else."""
    if "://" in value:
        parts = urlsplit(value)
        if parts.hostname is None or parts.port is None:
            return None
        return parts.hostname, parts.port
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]*", host):
        return None
    return host.strip("[]"), int(port)


def listen_ports(name: str) -> dict[str, list[tuple[str, int]]]:
    """A project service's listening addresses by option (``*listen``) -> [(host, port)].

    A value may be a list (a repeatable flag) or, from the environment, several addresses
    separated by spaces or ``;``.
    """
    found: dict[str, list[tuple[str, int]]] = {}
    for dest, value in parsed_services()[name].values.items():
        if not dest.endswith("listen") or value is None:
            continue
        items = value if isinstance(value, list) else re.split(r"[\s;]+", str(value))
        addresses = [split_address(str(item)) for item in items if item]
        found[dest] = [a for a in addresses if a is not None]
    return found


def metrics_ports(name: str) -> set[int]:
    listens = listen_ports(name)
    dests = ["metrics_listen"]
    if entry_points()[name].module in METRICS_ON_LISTEN:
        dests.append("listen")
    return {port for dest in dests for _, port in listens.get(dest, [])}


def image_name(service: dict[str, Any]) -> str:
    return str(service.get("image", "")).rsplit(":", 1)[0]


def serving_ports(name: str) -> set[int]:
    """Ports a service listens on inside its container."""
    service = services()[name]
    if is_project(service):
        return {port for addresses in listen_ports(name).values() for _, port in addresses}
    ports = {IMAGE_PORTS[image_name(service)]} if image_name(service) in IMAGE_PORTS else set()
    command = argv(name, service)
    for flag, value in itertools.pairwise(command):
        if flag == "--port" and value.isdigit():
            ports = {int(value)}
    return ports | {target for _, _, target in published_ports(name, service)}


def published_ports(name: str, service: dict[str, Any]) -> Iterator[tuple[str, int, int]]:
    """(protocol, host port, container port) of each ``ports:`` entry."""
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            yield (str(entry.get("protocol", "tcp")), int(entry["published"]),
                   int(entry["target"]))  # fmt: skip
            continue
        text, _, protocol = str(entry).partition("/")
        fields = text.rsplit(":", 2)
        assert len(fields) >= 2, f"{name}: publish ports as HOST:CONTAINER, got {entry!r}"
        assert fields[-1].isdigit() and fields[-2].isdigit(), f"{name}: port ranges in {entry!r}"
        yield protocol or "tcp", int(fields[-2]), int(fields[-1])


def scrape_targets() -> list[tuple[str, str, int]]:
    """(job, host, port) of every static Prometheus target."""
    config = yaml.safe_load(PROMETHEUS.read_text())
    found: list[tuple[str, str, int]] = []
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics", job["job_name"]
        assert job.get("scheme", "http") == "http", job["job_name"]
        for group in job.get("static_configs", []):
            for target in group["targets"]:
                address = split_address(str(target))
                assert address is not None, f"{job['job_name']}: target {target!r} is not host:port"
                found.append((job["job_name"], *address))
    return found


# -- the compose file -----------------------------------------------------------------------------


def test_compose_file_describes_the_local_cluster_topology() -> None:
    counts = Counter(point.label for point in entry_points().values())
    assert dict(counts) == TOPOLOGY
    images = {image_name(s) for s in services().values() if not is_project(s)}
    assert images == {"redis", "prom/prometheus", "grafana/grafana"}


def test_project_services_share_one_image_built_by_the_dockerfile() -> None:
    for name, service in project_services().items():
        build = service["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = (
            "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        )
        assert (ROOT / context).resolve() == ROOT, f"{name}: build context {context!r}"
        assert (ROOT / context / dockerfile).resolve() == DOCKERFILE, name
        assert service.get("image") == PROJECT_IMAGE, name


def test_third_party_images_are_pinned() -> None:
    for name, service in services().items():
        if not is_project(service):
            tag = str(service.get("image", "")).rpartition(":")[2]
            assert tag and tag != "latest" and "/" not in tag, f"{name}: pin the image's tag"


def test_every_command_is_an_entry_point_whose_help_exits_0() -> None:
    unique = {point.label: point for point in entry_points().values()}

    def run_help(point: EntryPoint) -> subprocess.CompletedProcess[str]:
        subcommands = point.label.split()[1:] if point.function else []  # "cachectl load"
        return run_entry_point(point, [*subcommands, "--help"], {}, dry=False)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(unique, pool.map(run_help, unique.values()), strict=True))
    for label, result in results.items():
        assert result.returncode == 0, f"`{label} --help` exit {result.returncode}: {result.stderr}"
        assert "usage:" in result.stdout, f"`{label} --help` printed no usage"


def test_every_entry_point_is_in_the_image() -> None:
    packages = set(wheel_packages())
    for name, point in entry_points().items():
        module = point.module or (point.function or "").split(":")[0]
        assert module.split(".")[0] in packages, (
            f"{name}: {module} is not in [tool.hatch.build.targets.wheel] packages "
            f"{sorted(packages)}, so `pip install .` in the Dockerfile leaves it out of the image"
        )


def test_every_flag_and_environment_variable_is_accepted_by_the_real_parser() -> None:
    errors = [outcome for outcome in dry_parse_all().values() if isinstance(outcome, str)]
    assert not errors, "\n\n".join(errors)
    for name, parsed in parsed_services().items():
        env = environment(project_services()[name])
        for variable in env:
            if variable.startswith(ENV_PREFIX):
                dest = variable.removeprefix(ENV_PREFIX).lower()
                assert dest in parsed.dests, (
                    f"{name}: {variable} sets no option of {entry_points()[name].label} "
                    f"(it reads {[ENV_PREFIX + d.upper() for d in parsed.dests]})"
                )
        for dest, allowed in parsed.choices.items():
            value = parsed.values.get(dest)
            if value is not None:
                # Values from the environment skip argparse's choices check: check them here.
                assert str(value) in allowed, f"{name}: {dest}={value!r} is not one of {allowed}"


def test_servers_listen_on_every_interface_of_their_container() -> None:
    for name in project_services():
        for dest, addresses in listen_ports(name).items():
            for host, _ in addresses:
                assert host in ("0.0.0.0", "::", ""), (
                    f"{name}: {dest} binds {host}, which other containers cannot reach"
                )


def test_published_ports_do_not_clash_and_reach_a_listening_port() -> None:
    seen: dict[tuple[str, int], str] = {}
    for name, service in services().items():
        for protocol, host_port, container_port in published_ports(name, service):
            key = (protocol, host_port)
            assert key not in seen, f"host port {host_port} published by {seen[key]} and {name}"
            seen[key] = name
            if is_project(service):
                assert container_port in serving_ports(name), (
                    f"{name}: publishes container port {container_port}, but it listens on "
                    f"{sorted(serving_ports(name))}"
                )


def test_addresses_of_other_services_name_a_port_they_listen_on() -> None:
    names = set(services())
    references = 0
    for name, parsed in parsed_services().items():
        for dest, value in parsed.values.items():
            for item in value if isinstance(value, list) else [value]:
                address = split_address(item) if isinstance(item, str) else None
                if address is None:
                    continue
                host, port = address
                if host in names:
                    references += 1
                    listening = sorted(serving_ports(host))
                    assert port in listening, (
                        f"{name}: {dest}={item!r}; {host} listens on {listening}"
                    )
                elif not dest.endswith("listen"):
                    assert host in ("0.0.0.0", "::", ""), (
                        f"{name}: {dest}={item!r} names no compose service (in a container, "
                        "loopback is the container itself)"
                    )
    assert references > 0


def test_each_engine_has_its_own_agent() -> None:
    points = entry_points()
    engines = {name for name, point in points.items() if point.module == "simengine"}
    scraped: list[str] = []
    for name, point in points.items():
        if point.module == "agents":
            values = parsed_services()[name].values
            urls = [values["engine_url"]] if values.get("engine_url") else []
            specs = values.get("engine") or []  # a list from flags, a string from the env
            specs = re.split(r"[\s;]+", specs) if isinstance(specs, str) else specs
            urls += [spec.split("=", 1)[1].split(",")[0] for spec in specs if spec]
            assert len(urls) == 1, f"{name}: one engine per agent, got {urls}"
            scraped.append(urlsplit(urls[0]).hostname or "")
    assert sorted(scraped) == sorted(engines)


def test_depends_on_names_services_and_waits_for_health_only_where_it_is_checked() -> None:
    for name, service in services().items():
        depends = service.get("depends_on", {})
        items = depends.items() if isinstance(depends, dict) else ((d, {}) for d in depends)
        for target, rule in items:
            assert target in services() and target != name, f"{name} depends on {target!r}"
            if (rule or {}).get("condition") == "service_healthy":
                assert "healthcheck" in services()[target], (
                    f"{name} waits for {target} to be healthy, but {target} has no healthcheck"
                )


def test_healthchecks_run_valid_python_against_the_service_port() -> None:
    for name, service in project_services().items():
        check = service.get("healthcheck")
        if check is None:
            continue
        test = check["test"]
        assert isinstance(test, list) and test[0] == "CMD", f"{name}: healthcheck in exec form"
        if test[1:3] == ["python", "-c"]:
            ast.parse(test[3])  # a SyntaxError names the service in the traceback
            probed = {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", test[3])}
            assert probed and probed <= serving_ports(name), (
                f"{name}: healthcheck probes {sorted(probed)}, it listens on {serving_ports(name)}"
            )


def test_long_running_services_restart() -> None:
    for name, service in services().items():
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name


# -- Prometheus -----------------------------------------------------------------------------------


def test_prometheus_scrapes_every_metrics_endpoint_and_only_those() -> None:
    endpoints = {(name, port) for name in project_services() for port in metrics_ports(name)}
    targets = [(host, port) for _, host, port in scrape_targets()]
    assert len(targets) == len(set(targets)), "a target is scraped twice"
    for host, port in targets:
        assert host in services(), f"scrape target {host}:{port} names no compose service"
        assert (host, port) in endpoints, f"{host}:{port} is not a metrics endpoint of {host}"
    assert endpoints - set(targets) == set(), "metrics endpoints Prometheus does not scrape"
    assert {name for name, _ in endpoints} == set(project_services()) - {
        name for name, point in entry_points().items() if point.label == "cachectl load"
    }, "every server serves metrics"


def bind_mounts(name: str) -> dict[Path, str]:
    """Host path -> container path of a service's bind mounts (short syntax)."""
    volumes = services()[name].get("volumes", [])
    return {(ROOT / str(v).split(":")[0]).resolve(): str(v).split(":")[1] for v in volumes}


def test_prometheus_reads_the_config_file_mounted_into_its_service() -> None:
    mounted = bind_mounts("prometheus").get(PROMETHEUS.resolve())
    assert mounted is not None, f"{PROMETHEUS.relative_to(ROOT)} is not mounted into prometheus"
    command = argv("prometheus", services()["prometheus"])
    assert f"--config.file={mounted}" in command


# -- Grafana --------------------------------------------------------------------------------------


def provisioned(kind: str) -> list[dict[str, Any]]:
    folder = GRAFANA / "provisioning" / kind
    files = sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml"))
    assert files, f"nothing in {folder}"
    return [yaml.safe_load(f.read_text()) for f in files]


def test_grafana_provisions_the_prometheus_datasource() -> None:
    mounts = bind_mounts("grafana")
    assert mounts.get((GRAFANA / "provisioning").resolve()) == "/etc/grafana/provisioning"
    sources = [s for doc in provisioned("datasources") for s in doc["datasources"]]
    assert [s["type"] for s in sources] == ["prometheus"]
    address = split_address(sources[0]["url"])
    assert address is not None and address[0] == "prometheus"
    assert address[1] in serving_ports("prometheus")
    scrape = yaml.safe_load(PROMETHEUS.read_text())["global"]["scrape_interval"]
    assert sources[0]["jsonData"]["timeInterval"] == scrape, "$__rate_interval needs it"


def test_grafana_provisions_the_dashboard_from_its_mounted_folder() -> None:
    providers = [p for doc in provisioned("dashboards") for p in doc["providers"]]
    paths = {p["options"]["path"] for p in providers}
    assert bind_mounts("grafana").get(DASHBOARD.parent.resolve()) in paths
    home = environment(services()["grafana"]).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    folder = bind_mounts("grafana")[DASHBOARD.parent.resolve()]
    assert home in (None, f"{folder}/{DASHBOARD.name}"), "the home dashboard is not mounted there"


def dashboard_panels() -> list[dict[str, Any]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    nested = [p for row in panels if row.get("type") == "row" for p in row.get("panels", [])]
    return [p for p in panels + nested if p.get("type") != "row"]


def test_dashboard_panels_use_the_provisioned_datasource() -> None:
    uids = {s["uid"] for doc in provisioned("datasources") for s in doc["datasources"]}
    for panel in dashboard_panels():
        for item in [panel, *panel["targets"]]:
            assert item["datasource"]["uid"] in uids, panel["title"]


_METRIC = re.compile(r"(?<![A-Za-z0-9_:])((?:cacheroute_|vllm:)[A-Za-z0-9_:]*)")
_DEFINED = re.compile(r"[\"']((?:cacheroute_|vllm:)[A-Za-z0-9_:]+)[\"']")
_EXPOSED_SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count", "_info")


@cache
def defined_metrics() -> frozenset[str]:
    """Every sample name the project's code can expose (metric names are string literals)."""
    names: set[str] = set()
    for package in pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        for source in (ROOT / package).rglob("*.py"):
            for base in _DEFINED.findall(source.read_text()):
                names.update(base + suffix for suffix in _EXPOSED_SUFFIXES)
    return frozenset(names)


def test_dashboard_queries_name_metrics_the_project_defines() -> None:
    used: set[str] = set()
    for panel in dashboard_panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = set(_METRIC.findall(target["expr"]))
            assert names, f"{panel['title']!r}: {target['expr']!r} names no project metric"
            unknown = names - defined_metrics()
            assert not unknown, f"{panel['title']!r} queries metrics no code defines: {unknown}"
            used |= names
    # What the dashboard is for: decisions by reason, served hit rate, TTFT, node load, tables.
    for wanted in (
        "cacheroute_router_decisions_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:time_to_first_token_seconds_bucket",
        "cacheroute_controlplane_node_load",
        "cacheroute_router_table_generation",
        "cacheroute_router_table_info",
    ):
        assert wanted in used, f"the dashboard does not show {wanted}"


# -- Dockerfile and .dockerignore ------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_dockerfile_installs_the_project_without_dev_extras_as_a_non_root_user() -> None:
    steps = dockerfile_instructions()
    bases = [args.split()[0] for op, args in steps if op == "FROM"]
    assert bases and all(base == "python:3.11-slim" for base in bases), bases
    runs = " ".join(args for op, args in steps if op == "RUN")
    # Either `pip install .`, or `pip wheel .` in a build stage and `pip install NAME` from it.
    name = re.escape(pyproject()["project"]["name"])
    assert re.search(r"pip (install|wheel)\b[^&;]*\s\.(\s|$)", runs), "pip must build ."
    assert re.search(rf"pip install\b[^&;]*\s(\.|{name})(\s|$)", runs), "pip must install it"
    assert "[dev]" not in runs and ".[" not in runs, "no extras in the image"
    users = [args.split(":")[0] for op, args in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image runs as a non-root user"
    # The compose commands are whole argv lists: an ENTRYPOINT would be prepended to them.
    assert "ENTRYPOINT" not in {op for op, _ in steps}


def _glob(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regular expression."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token) or re.escape(
            token
        )
    return re.compile(out)


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern also covers what is below it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        glob = _glob(raw.removeprefix("!").strip("/"))
        if any(glob.fullmatch(prefix) for prefix in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_venv_out_and_the_packages_in() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (".venv", ".venv/bin/python", ".git", "tests/system/test_compose.py"):
        assert dockerignored(path, patterns), f"{path} is in the build context"
    needed = ["pyproject.toml", str(pyproject()["project"]["readme"])]
    needed += pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for path in needed:
        assert not dockerignored(path, patterns), f"{path} is missing from the build context"
        assert not dockerignored(f"{path}/__init__.py", patterns), f"{path}/ is not all there"


def test_dockerignore_matching_follows_docker_rules() -> None:
    patterns = ["**/__pycache__", "docs", "!docs/keep.md", "*.pyc"]
    assert dockerignored("agents/__pycache__/x.pyc", patterns)
    assert dockerignored("__pycache__", patterns)
    assert dockerignored("x.pyc", patterns)
    assert not dockerignored("agents/x.pyc", patterns)  # * does not cross a /
    assert dockerignored("docs/notes/a.md", patterns)
    assert not dockerignored("docs/keep.md", patterns)
    assert not dockerignored("agents/agent.py", patterns)


def test_interpolation_uses_defaults_and_rejects_variables_without_one() -> None:
    assert interpolate("${A:-x}:${B-y}:$$HOME") == "x:y:$HOME"
    with pytest.raises(AssertionError, match="needs a default"):
        interpolate("${QPS}")
