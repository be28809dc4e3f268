"""The compose services' commands run through their real entry points' parsers, and their ports.

No Docker engine runs in CI: each project service's command and ``CACHEROUTE_*`` variables go
through the real entry point, which stops where it would start serving (all services one after
the other in one child process, each with its own argv and environment), and the listening,
published and scraped ports are read from what the parsers accepted.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.support.compose import (
    ENV_PREFIX,
    PROMETHEUS,
    ROOT,
    argv,
    environment,
    image_name,
    is_project,
    project_services,
    pyproject,
    services,
)
from tests.support.timing import run_patiently

# Entry points that serve /metrics on their --listen port beside their API, as vLLM does.
METRICS_ON_LISTEN = frozenset({"simengine"})
# Ports of the third-party images when their command does not name one.
IMAGE_PORTS = {"redis": 6379, "prom/prometheus": 9090, "grafana/grafana": 3000}
PARSE_TIMEOUT_S = 60.0

# Runs one entry point as its command line would (``python -c _RUN SPEC``, SPEC naming a -m
# module or a console script's function and the arguments): the ``--help`` checks.
_RUN = r"""
import importlib, json, runpy, sys

spec = json.loads(sys.argv[1])
sys.argv = [spec["prog"], *spec["args"]]
if spec["module"]:
    runpy.run_module(spec["module"], run_name="__main__", alter_sys=True)
else:
    module, _, function = spec["function"].partition(":")
    sys.exit(getattr(importlib.import_module(module), function)())
"""

# Every service's dry run, one after the other in one process (:func:`dry_parse_all`), each with
# its own argv, environment, stdout and stderr: the program runs for real up to the moment it
# would start serving: argparse parses (exit 2 on a bad flag or value), the entry point validates
# what it validates after parsing (engine specs, TLS pairs, workload names), and its
# ``asyncio.run(...)`` (how every CacheRoute process starts) is replaced by a stop that records
# the options parse_args returned and what the parser accepts. One interpreter, not one per
# service: the entry points' imports (~0.6 s of CPU each) are paid once.
_RUN_MANY = r"""
import argparse, asyncio, contextlib, importlib, io, json, os, runpy, sys

specs = json.loads(open(sys.argv[1]).read())
parsed = []

class Started(BaseException):
    pass

def plain(value):
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)

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
results = []
for spec in specs:
    parsed.clear()
    os.environ.clear()
    os.environ.update(spec["env"])
    sys.argv = [spec["prog"], *spec["args"]]
    err = io.StringIO()
    result = {"code": 0, "parsed": None}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            if spec["module"]:
                runpy.run_module(spec["module"], run_name="__main__", alter_sys=True)
            else:
                module, _, function = spec["function"].partition(":")
                sys.exit(getattr(importlib.import_module(module), function)())
            result["code"] = "the entry point returned without starting"
        except Started:
            if not parsed:
                result["code"] = "the entry point started without calling ArgumentParser.parse_args"
            else:
                parser, namespace = parsed[0]
                options = [a for a in parser._actions if a.option_strings]
                result["parsed"] = {
                    "values": {k: plain(v) for k, v in vars(namespace).items() if not callable(v)},
                    "dests": sorted({a.dest for a in options}),
                    "choices": {a.dest: [str(c) for c in a.choices] for a in options if a.choices},
                }
        except SystemExit as exc:
            code = exc.code
            result["code"] = code if code not in (0, None) else "exited 0 without starting"
    result["stderr"] = err.getvalue()[-2000:]
    results.append(result)
print(json.dumps(results))
"""


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
    point: EntryPoint, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """Run an entry point for real with ``args`` (``--help``: it must exit)."""
    spec = {"prog": point.prog, "args": args, "module": point.module,
            "function": point.function}  # fmt: skip
    try:
        return run_patiently(
            [sys.executable, "-c", _RUN, json.dumps(spec)],
            cwd=ROOT, env=child_env(env), capture_output=True, text=True, check=False,
            timeout=PARSE_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"`{point.label}` {args} did not exit within {PARSE_TIMEOUT_S:.0f} s"
        ) from exc


@cache
def dry_parse_all() -> dict[str, Parsed | str]:
    """Every project service's command, through its entry point's parser (one process, above)."""
    points = entry_points()
    names = list(project_services())
    specs = [
        {"prog": points[name].prog, "args": points[name].args, "module": points[name].module,
         "function": points[name].function,
         "env": child_env(environment(project_services()[name]))}
        for name in names
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "specs.json"
        path.write_text(json.dumps(specs))
        try:
            batch = run_patiently(
                [sys.executable, "-c", _RUN_MANY, str(path)], cwd=ROOT, capture_output=True,
                text=True, check=False, timeout=PARSE_TIMEOUT_S * 2,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                "the dry runs did not stop: does each still start with asyncio.run?"
            ) from exc
    assert batch.returncode == 0, (
        f"the dry runs failed: exit {batch.returncode}\n{batch.stderr[-2000:]}"
    )
    results = json.loads(batch.stdout.strip().splitlines()[-1])
    outcomes: dict[str, Parsed | str] = {}
    for name, result in zip(names, results, strict=True):
        point, env = points[name], environment(project_services()[name])
        if result["parsed"] is None:
            outcomes[name] = (
                f"`{point.label}` rejects {shlex.join(point.args)!r} with environment {env}: "
                f"exit {result['code']}\n{result['stderr']}"
            )
        else:
            data = result["parsed"]
            outcomes[name] = Parsed(data["values"], data["dests"], data["choices"])
    return outcomes


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
