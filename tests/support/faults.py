"""Real components as subprocesses on 127.0.0.1 for the fault tests (tests/system/test_faults_*).

Each server binds port 0 (or a given port, to restart it where its clients look) and logs the
address it serves on; :meth:`Proc.logged` reads it back. Faults are real signals to real
processes (SIGKILL, SIGSTOP/SIGCONT). No test here: shared by the fault tests.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from cachectl.localcluster.processes import ManagedProcess, logged_records, python_module, stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from tests.support.timing import LagMeter, StartDeadline

PATIENCE = 4  # a claimed bound is waited for this many times over before failing

HOST = "127.0.0.1"
LOG = ("--log-format", "json", "--log-level", "info")


def logged_events(log: Path, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``log`` whose ``event`` is ``event`` (other lines are skipped)."""
    return logged_records(log, event)


class Proc(ManagedProcess):
    """A ManagedProcess that can read fields of the JSON events it logged.

    Started without a ``preexec_fn``: with one, Python forks (running gRPC's fork handlers while
    the test process's own gRPC threads are busy, which once killed a child at start) instead
    of spawning; the fleet's ``stop`` in every test's ``finally`` ends the children instead.
    """

    def start(self) -> Proc:
        with self.log_path.open("ab") as log:  # the child keeps its own copy
            self.process = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        return self

    def events(self, event: str) -> list[dict[str, Any]]:
        return logged_events(self.log_path, event)

    async def logged(
        self, event: str, field: str, count: int = 1, timeout: float = 30.0
    ) -> list[str]:
        """``field`` of the first ``count`` ``event`` lines; fails after ``timeout`` seconds of
        the machine's time (:class:`tests.support.timing.StartDeadline`: mostly start-up lines,
        which a loaded machine delays without anything being wrong)."""
        with StartDeadline(timeout) as deadline:
            while True:
                self.check()
                found = [str(e[field]) for e in self.events(event)]
                if len(found) >= count:
                    return found[:count]
                if deadline.expired():
                    raise AssertionError(
                        f"{self.name} did not log {event!r} in {deadline.describe()}:"
                        f"{self.tail(10)}"
                    )
                await asyncio.sleep(0.05)


class Fleet:
    """The processes a test started; :meth:`stop` ends them all (also on failure)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []

    def start(self, name: str, module: str, *args: str) -> Proc:
        proc = Proc(name, python_module(module, *args, *LOG), self.log_dir)
        proc.start()
        self.procs.append(proc)
        return proc

    def controlplane(self, name: str, redis_url: str, *extra: str, port: int = 0) -> Proc:
        return self.start(
            name, "controlplane",
            "--listen", f"{HOST}:{port}", "--redis-url", redis_url, "--metrics-listen", "",
            "--instance-id", name, "--shutdown-grace", "1", *extra,
        )  # fmt: skip

    def engines(self, name: str, count: int) -> Proc:
        listen = [a for _ in range(count) for a in ("--listen", f"{HOST}:0")]
        return self.start(name, "simengine", *listen, "--speedup", "20")

    def router(self, name: str, redis_url: str, *extra: str) -> Proc:
        return self.start(
            name, "dataplane",
            "--listen", f"{HOST}:0", "--redis-url", redis_url, "--router-id", name,
            "--metrics-listen", f"{HOST}:0", "--grace", "1", "--table-interval", "0.5",
            "--load-interval", "0.5", *extra,
        )  # fmt: skip

    def agents(self, name: str, controlplane: str, engines: dict[str, str], *extra: str) -> Proc:
        specs = [a for node, url in engines.items() for a in ("--engine", f"{node}={url}")]
        return self.start(
            name, "agents", "--controlplane", controlplane, "--interval", "0.25",
            "--scrape-timeout", "2.5", *specs, *extra,
        )  # fmt: skip

    def stop(self) -> None:
        stop_all(list(reversed(self.procs)), grace_s=5.0)


async def until(
    check: Callable[[], Awaitable[bool]],
    timeout: float,
    what: str,
    *,
    lag: LagMeter | None = None,
) -> float:
    """Poll ``check`` until true; the seconds it took (fails naming ``what`` after ``timeout``).

    With ``lag``, ``timeout`` is the product's claimed bound rather than a patience limit: the
    wait goes on up to ``PATIENCE`` times longer, and a bound missed while the machine starved
    this process is skipped with the measured lag (:meth:`LagMeter.claim`), not failed."""
    started = time.monotonic()
    limit = timeout * PATIENCE if lag is not None else timeout
    while True:
        try:
            if await check():
                took = time.monotonic() - started
                if lag is not None:
                    lag.claim(took <= timeout, f"{what} within {timeout} s (took {took:.1f} s)")
                return took
        except grpc.aio.AioRpcError:
            pass
        if time.monotonic() - started > limit:
            if lag is not None:
                lag.claim(False, f"{what} within {timeout} s (not within {limit} s)")
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.1)


async def list_nodes(address: str, pool: str = "default") -> list[admin_pb2.NodeStatus]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = admin_pb2_grpc.NodeServiceStub(channel)
        reply = await stub.ListNodes(admin_pb2.ListNodesRequest(pool=pool), timeout=2.0)
        return list(reply.nodes)


class RouteProbe:
    """Routes a fresh key every ``interval_s`` and records (time, node id or the error code)."""

    def __init__(self, address: str, interval_s: float = 0.01) -> None:
        self.address = address
        self.interval_s = interval_s
        self.outcomes: list[tuple[float, str]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> RouteProbe:
        self._task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> list[tuple[float, str]]:
        self._stop.set()
        if self._task is not None:
            await self._task
        return self.outcomes

    def failures(self, since: float = 0.0) -> list[tuple[float, str]]:
        return [(t, o) for t, o in self.outcomes if t >= since and o.startswith("error:")]

    async def _run(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            i = 0
            while not self._stop.is_set():
                try:
                    answer = await stub.Route(routing_pb2.RouteRequest(key=f"p-{i}"), timeout=2.0)
                    self.outcomes.append((time.time(), answer.node_id))
                except grpc.aio.AioRpcError as exc:
                    self.outcomes.append((time.time(), f"error:{exc.code().name}"))
                i += 1
                await asyncio.sleep(self.interval_s)
