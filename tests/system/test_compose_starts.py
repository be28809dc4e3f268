"""docker-compose.yml started, not only parsed: every CacheRoute service runs as a process.

No Docker engine runs here, so each project service is started as the container would start it:
its command (``python`` is this interpreter) and exactly its environment, in the order its
``depends_on`` gives, and each is awaited with its own ``healthcheck`` command, run for real, as
``condition: service_healthy`` would. What cannot be the same on one machine is rewritten, and
only that: ``0.0.0.0:PORT`` listen addresses become ``127.0.0.1:0`` (the port each server bound is
read from its log), and a ``service:PORT`` reference (``redis:6379``, ``controlplane:50051``,
``http://engine-0:8001``) becomes the address that service really serves on, which also checks
that every reference names a service started before it. The load generator runs one short round
(the file's ``LOAD_DURATION`` knob) through both routers; then one router is stopped as ``docker
compose stop`` stops it and the other goes on serving its OpenAI front.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from cachectl.localcluster.processes import stop_all
from cacheroute_state.embedded import find_redis_server
from servekit.processes import free_port
from tests.support.compose import argv, environment, project_services, services
from tests.support.helm_run import ChartProc
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

# Where each entry point logs the addresses it bound: (event, {listen variable: field}).
BOUND = {
    "controlplane": ("control plane serving", {"CACHEROUTE_LISTEN": "listen",
                                               "CACHEROUTE_METRICS_LISTEN": "metrics"}),
    "dataplane": ("router serving", {"CACHEROUTE_LISTEN": "address",
                                     "CACHEROUTE_METRICS_LISTEN": "metrics_port",
                                     "CACHEROUTE_HTTP_LISTEN": "http_port"}),
    "simengine": ("engine serving", {"CACHEROUTE_LISTEN": "url"}),
    "agents": ("metrics_endpoint", {"CACHEROUTE_METRICS_LISTEN": "url"}),
}  # fmt: skip
_REFERENCE = re.compile(r"\b([a-z][a-z0-9-]*):(\d+)\b")
_ANY_ADDRESS = re.compile(r"0\.0\.0\.0:\d+")
LOAD_SECONDS = "6"


def start_order() -> list[str]:
    """Service names with every ``depends_on`` before its dependents (compose's own order)."""
    all_services = services()
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        if name in order:
            return
        for dependency in all_services[name].get("depends_on") or {}:
            visit(str(dependency), (*path, name))
        order.append(name)

    for name in all_services:
        visit(name, ())
    return order


class Addresses:
    """``service:PORT`` (as the compose network knows it) -> ``127.0.0.1:PORT`` (as it runs)."""

    def __init__(self) -> None:
        self.known: dict[str, str] = {}

    def rewrite(self, value: str, where: str) -> str:
        def real(match: re.Match[str]) -> str:
            if match.group(1) not in services():
                return match.group(0)
            found = self.known.get(match.group(0))
            assert found is not None, f"{where} names {match.group(0)}, which is not serving yet"
            return found

        return _REFERENCE.sub(real, _ANY_ADDRESS.sub("127.0.0.1:0", value))

    def add(self, service: str, compose_port: int, port: int) -> None:
        self.known[f"{service}:{compose_port}"] = f"127.0.0.1:{port}"


def bound_ports(proc: ChartProc, module: str, env: dict[str, str]) -> dict[int, int]:
    """Compose port -> the port the server bound, for each of its ``0.0.0.0:PORT`` variables."""
    event, fields = BOUND[module]
    (line,) = proc.events(event)[:1]
    ports: dict[int, int] = {}
    for variable, field in fields.items():
        if variable in env:
            compose_port = int(env[variable].rpartition(":")[2])
            found = re.search(r":(\d+)(?:/|$)", str(line[field]))
            ports[compose_port] = int(found.group(1)) if found else int(line[field])
    return ports


def healthcheck(service: dict[str, Any], own: dict[int, int]) -> list[str]:
    """The service's healthcheck command, its ports the ones the server really bound."""
    test = [str(part) for part in service["healthcheck"]["test"]]
    assert test[0] == "CMD"
    command = [sys.executable if part == "python" else part for part in test[1:]]
    return [re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{own[int(m.group(1))]}", part)
            for part in command]  # fmt: skip


@pytest.fixture
def compose_redis(tmp_path: Path) -> Iterator[int]:
    """The ``redis`` service: its command's arguments on a free loopback port."""
    command = argv("redis", services()["redis"])
    assert command[0] == "redis-server"
    port = free_port()
    binary = find_redis_server()
    log = (tmp_path / "redis.log").open("wb")
    process = subprocess.Popen(
        [str(binary), *command[1:], "--port", str(port), "--bind", "127.0.0.1",
         "--dir", str(tmp_path)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()


async def healthy(command: list[str]) -> bool:
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await proc.wait() == 0


async def test_every_service_starts_healthy_serves_a_load_round_and_survives_a_stopped_router(
    compose_redis: int, tmp_path: Path
) -> None:
    addresses = Addresses()
    addresses.add("redis", 6379, compose_redis)
    project = project_services()
    servers: dict[str, ChartProc] = {}
    own_ports: dict[str, dict[int, int]] = {}
    try:
        for name in start_order():
            if name not in project or name == "load":
                continue
            service = project[name]
            command = argv(name, service)
            assert command[:2] == ["python", "-m"], f"{name}: {command}"
            module = command[2]
            given = environment(service)
            env = {k: addresses.rewrite(v, f"{name}.environment.{k}") for k, v in given.items()}
            proc = ChartProc(name, [sys.executable, *command[1:]], tmp_path, env).start()
            servers[name] = proc
            event, fields = BOUND[module]
            await proc.logged(event, next(iter(fields.values())), timeout=60)
            own_ports[name] = bound_ports(proc, module, given)
            for compose_port, port in own_ports[name].items():
                addresses.add(name, compose_port, port)
            check = healthcheck(service, own_ports[name])

            async def passes(check: list[str] = check) -> bool:
                return await healthy(check)

            try:  # compose probes every 5 s; each probe here is a Python process too
                await eventually(passes, timeout=90, every=0.5)
            except AssertionError as exc:
                raise AssertionError(f"{name}: its healthcheck never passed ({exc})") from None

        assert {name for name in project if name != "load"} == set(servers)
        load = project["load"]
        command = [addresses.rewrite(part, "load.command") for part in argv("load", load)]
        command[command.index("--duration") + 1] = LOAD_SECONDS  # the LOAD_DURATION knob
        assert command[:2] == ["cachectl", "load"]
        done = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cachectl", *command[1:], "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await done.communicate()
        assert done.returncode == 0, err.decode()[-2000:]
        summary = json.loads(out)
        assert summary["requests"] > 0
        assert summary["failed"] == 0, summary

        stopped, survivor = servers["router-1"], servers["router-0"]
        stopped.signal(signal.SIGTERM)  # what `docker compose stop router-1` sends
        assert await asyncio.to_thread(stopped.wait, 30.0), "router-1 did not stop"
        assert stopped.process is not None and stopped.process.returncode == 0, stopped.tail()
        front = addresses.known["router-0:8080"]
        async with AsyncOpenAI(base_url=f"http://{front}/v1", api_key="unused") as client:
            model = (await client.models.list()).data[0].id
            answer = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
        assert answer.choices[0].message.content
        assert await healthy(healthcheck(project["router-0"], own_ports["router-0"]))
        for name, proc in servers.items():
            if proc is not stopped:
                proc.check()
            assert "Traceback" not in proc.log_path.read_text(errors="replace"), name
        assert survivor.events("router serving")
    finally:
        stop_all(list(servers.values()), grace_s=5.0)
