"""docker-compose.yml, checked without Docker: its topology, commands, ports and dependencies.

No Docker engine runs in CI, so ``docker compose config`` is not available. These tests parse the
file and hold it against the project itself: every service command and its ``CACHEROUTE_*``
variables go through the real entry point (in a subprocess that runs it up to the moment it would
start serving), and addresses and ports are cross-checked between services.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from tests.support.compose import (
    DOCKERFILE,
    ENV_PREFIX,
    PROJECT_IMAGE,
    ROOT,
    environment,
    image_name,
    interpolate,
    is_project,
    project_services,
    services,
    wheel_packages,
)
from tests.support.compose_parse import (
    EntryPoint,
    dry_parse_all,
    entry_points,
    listen_ports,
    parsed_services,
    published_ports,
    run_entry_point,
    serving_ports,
    split_address,
)

# What the compose file is for (issue 5, item 4): entry point -> number of services running it.
TOPOLOGY = {
    "python -m controlplane": 1,
    "python -m dataplane": 2,
    "python -m simengine": 4,
    "python -m agents": 4,
    "cachectl load": 1,
}


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
        return run_entry_point(point, [*subcommands, "--help"], {})

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


def test_interpolation_uses_defaults_and_rejects_variables_without_one() -> None:
    assert interpolate("${A:-x}:${B-y}:$$HOME") == "x:y:$HOME"
    with pytest.raises(AssertionError, match="needs a default"):
        interpolate("${QPS}")
