"""Helpers for the control-plane tests: a fast-ticking instance, stubs, stub agents, traffic.

(No tests here; shared by tests/controlplane/ and tests/cachectl/test_cachectl_admin.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, agent_pb2, agent_pb2_grpc, cluster_pb2
from controlplane.config import ControlPlaneConfig
from controlplane.server import ControlPlane
from dataplane.core.keys import hash_key
from tests.support.timing import StartDeadline

# Past every gate, by name and with a reason (setup steps that are not about the gates).
ALL_GATES = ("destinations", "shadow")
SKIP_ALL: dict[str, Any] = {"skip_gates": list(ALL_GATES), "reason": "test setup"}
SKIP_ARGS = ("--skip-gate", "destinations", "--skip-gate", "shadow", "--reason", "test setup")


def fast_config(redis_url: str, **overrides: Any) -> ControlPlaneConfig:
    """An instance on free ports whose loops tick fast enough for tests."""
    base = ControlPlaneConfig(
        listen="127.0.0.1:0",
        redis_url=redis_url,
        metrics_listen="127.0.0.1:0",
        load_publish_interval_s=0.05,
        rate_update_interval_s=0.1,
        rate_half_life_s=60.0,
        leader_lease_ttl_s=1.0,
        grace_s=0.5,
        instance_id="cp-test",
    )
    return replace(base, **overrides)


def quick_config(redis_url: str, **overrides: Any) -> ControlPlaneConfig:
    """fast_config that stops at once: a short grace (no RPC is left in flight at the end) and
    no HTTP metrics endpoint (closing one takes its 0.5 s poll; the registry is still there)."""
    return fast_config(redis_url, **{"grace_s": 0.05, "metrics_listen": "", **overrides})


@asynccontextmanager
async def running(config: ControlPlaneConfig) -> AsyncIterator[ControlPlane]:
    plane = ControlPlane(config)
    await plane.start()
    try:
        yield plane
    finally:
        await plane.stop()


class Clients:
    """Async stubs of one control plane."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.plans = admin_pb2_grpc.PlanServiceStub(channel)
        self.nodes = admin_pb2_grpc.NodeServiceStub(channel)
        self.agents = agent_pb2_grpc.AgentServiceStub(channel)


@asynccontextmanager
async def clients(address: str) -> AsyncIterator[Clients]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield Clients(channel)


def report(
    node_id: str,
    *,
    pool: str = "default",
    address: str = "",
    running: float = 0,
    waiting: float = 0,
    healthy: bool = True,
    stale: bool = False,
    interval_ms: int = 100,
    leaving: bool = False,
    weight: float = 0.0,
) -> agent_pb2.NodeReport:
    now = int(time.time() * 1000)
    return agent_pb2.NodeReport(
        node_id=node_id,
        pool=pool,
        address=address or f"10.0.0.{abs(hash(node_id)) % 250 + 1}:8000",
        engine_kind=agent_pb2.ENGINE_KIND_SIMULATED,
        sent_at_unix_ms=now,
        scraped_at_unix_ms=now,
        healthy=healthy,
        stale=stale,
        running=running,
        waiting=waiting,
        report_interval_ms=interval_ms,
        leaving=leaving,
        weight=weight,
    )


class StubAgent:
    """One agent stream: ``send`` reports, read ``directives``."""

    def __init__(self, stub: agent_pb2_grpc.AgentServiceAsyncStub) -> None:
        self.call = stub.Connect()
        self.directives: list[agent_pb2.AgentDirective] = []

    async def send(self, msg: agent_pb2.NodeReport) -> None:
        await self.call.write(msg)

    async def read(self, timeout: float = 5.0) -> agent_pb2.AgentDirective:
        directive = await asyncio.wait_for(self.call.read(), timeout)
        assert isinstance(directive, agent_pb2.AgentDirective), f"stream ended: {directive!r}"
        self.directives.append(directive)
        return directive

    async def close(self) -> None:
        await self.call.done_writing()

    async def status(self) -> grpc.StatusCode:
        return await self.call.code()


def traffic(
    router: str,
    window: int,
    counts: dict[str, int],
    *,
    total: int,
    pool: str = "default",
    window_s: float = 10.0,
    start_ms: int = 1_700_000_000_000,
) -> cluster_pb2.TrafficReport:
    """Router ``router``'s report for window number ``window`` (windows of ``window_s``)."""
    begin = start_ms + int(window * window_s * 1000)
    return cluster_pb2.TrafficReport(
        router_id=router,
        pool=pool,
        window_start_unix_ms=begin,
        window_end_unix_ms=begin + int(window_s * 1000),
        total_requests=total,
        top_keys=[
            cluster_pb2.KeyCount(key_hash=hash_key(k), key=k, count=c) for k, c in counts.items()
        ],
    )


def node_ids(statuses: Sequence[Any]) -> list[str]:
    return [s.record.node_id for s in statuses]


async def register_nodes(c: Clients, pool: str = "default", count: int = 4) -> list[str]:
    """Static nodes node-0..node-{count-1}: the destinations of ``factories.small_plan``, so a
    rollout of such a plan passes the destination gate."""
    ids = [f"node-{i}" for i in range(count)]
    for i, node in enumerate(ids):
        request = admin_pb2.AddNodeRequest(pool=pool, node_id=node, address=f"127.0.0.1:{9000 + i}")
        await c.nodes.AddNode(request)
    return ids


ROOT = Path(__file__).resolve().parents[2]


STARTUP_TIMEOUT_S = 90.0  # seconds of the machine's time (tests/support/timing.py)


class ControlPlaneProcess:
    """A control-plane subprocess whose JSON log lines are collected by a thread."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0",
             "--embedded-redis-port", "0",  # tests: a free port (a later flag overrides it)
             "--metrics-listen", "127.0.0.1:0", "--load-publish-interval", "0.05",
             "--rate-update-interval", "0.1", "--shutdown-grace", "1", *args],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        try:
            # A hang guard, not a speed bound: a starved machine can take long to start Python,
            # so the patience is in the machine's own seconds (StartDeadline).
            with StartDeadline(STARTUP_TIMEOUT_S) as deadline:
                serving = self.wait_for("control plane serving", deadline=deadline)
        except BaseException:
            # Not yet in any fixture's list: left running it would keep publishing (empty) load
            # snapshots into the Redis of whichever test runs next on this worker.
            self.kill()
            raise
        self.address: str = serving["listen"]
        self.redis_url: str = serving["redis_url"]

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:  # closed at EOF, when the process has exited
            for line in self.proc.stderr:
                try:
                    self.lines.put(json.loads(line))
                except json.JSONDecodeError:
                    self.lines.put({"event": "raw", "line": line})

    def wait_for(
        self, event: str, timeout: float = 15.0, *, deadline: StartDeadline | None = None
    ) -> dict[str, Any]:
        """The first ``event`` line; waits ``timeout`` seconds of the machine's time, or as long
        as ``deadline`` says (patience: tests/support/timing.py)."""
        for seen in self.seen:
            if seen.get("event") == event:
                return seen
        if deadline is None:
            with StartDeadline(timeout) as own:
                return self.wait_for(event, deadline=own)
        while not deadline.expired():
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.seen.append(line)
            if line.get("event") == event:
                return line
        raise AssertionError(f"no {event!r} log line in {deadline.describe()}; saw {self.seen}")

    def terminate(self, timeout: float = 10.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
