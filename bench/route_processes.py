"""The processes ``bench_route.py`` starts besides the router: the bare server and the client.

The bare server is the server stack's floor (one constant decision); the client is one
load-generating process per measurement, writing its latencies (and the server's CPU) to a file.
Both run as subcommands of ``bench_route.py`` (``bare-server``, ``client``); ``PIN`` places them
on CPUs (``--pin``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from route_workload import requests_for

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from servekit.grpc_server import GrpcServer
from servekit.processes import die_with_parent

BENCH_ROUTE = Path(__file__).resolve().with_name("bench_route.py")
PY = sys.executable
# (server CPU, client CPU) with --pin: both servers share one CPU, the client has the other, so the
# scheduler cannot favour one server by where it places it (unpinned, two identical bare servers
# differed by up to ±60 µs of CPU per call on the loaded 2-vCPU machine; pinned, by ±2 µs).
PIN: tuple[int, int] | None = None


def preexec_for(cpu: int | None) -> Any:
    """A ``preexec_fn``: die with the parent, and run on ``cpu`` when pinning."""
    die = die_with_parent()

    def start() -> None:
        die()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return start


# -- the bare server ----------------------------------------------------------------------------


class BareServicer(routing_pb2_grpc.RouterServiceServicer):
    """Returns one constant decision (and a constant batch of 1,000): the server stack's floor."""

    def __init__(self) -> None:
        self.decision = routing_pb2.RouteDecision(
            node_id="node-00", address="10.0.0.0:8000", reason=routing_pb2.ROUTE_REASON_WARM,
            version="p0123456789abcdef", generation=1, key_hash=1, key="tenant-1",
            policy="cacheroute",
        )  # fmt: skip
        self.batch = routing_pb2.RouteBatchResponse(decisions=[self.decision] * 1000)

    async def Route(self, request: Any, context: Any) -> routing_pb2.RouteDecision:  # noqa: N802
        return self.decision

    async def RouteBatch(self, request: Any, context: Any) -> routing_pb2.RouteBatchResponse:  # noqa: N802
        return self.batch


async def bare_server(listen: str) -> None:
    name = routing_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
    server = GrpcServer(listen, service_names=[name])
    routing_pb2_grpc.add_RouterServiceServicer_to_server(BareServicer(), server.server)
    await server.start()
    from servekit.signals import run_until_signal  # noqa: PLC0415

    await run_until_signal(lambda: server.stop(1.0))


# -- the client ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of process ``pid`` so far (clock ticks: 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_seconds(pid: int) -> float:
    """CPU of the live threads of ``pid`` in ns resolution (schedstat): for idle figures."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError):
            total += int(stat.read_text().split()[0])
    return total / 1e9


async def client(
    target: str, mode: str, concurrency: int, duration: float, out: Path, cpu_pid: int = 0
) -> None:
    reqs = requests_for(seed=1)
    batch = routing_pb2.RouteBatchRequest(requests=reqs[:1000])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        starts: list[float] = []
        lats: list[float] = []
        decisions = 0

        async def worker(index: int, until: float, record: bool) -> None:
            nonlocal decisions
            i = index * 7919
            while time.monotonic() < until:
                t0 = time.monotonic()
                if mode == "batch":
                    await stub.RouteBatch(batch)
                    decisions += 1000
                else:
                    await stub.Route(reqs[i % len(reqs)])
                    i += 1
                if record:
                    starts.append(t0)
                    lats.append(time.monotonic() - t0)

        warm_until = time.monotonic() + 0.5
        await asyncio.gather(*(worker(i, warm_until, False) for i in range(concurrency)))
        decisions = 0
        cpu0 = cpu_seconds(cpu_pid) if cpu_pid else 0.0
        begin = time.monotonic()
        until = begin + duration
        await asyncio.gather(*(worker(i, until, True) for i in range(concurrency)))
        elapsed = time.monotonic() - begin
        cpu = cpu_seconds(cpu_pid) - cpu0 if cpu_pid else 0.0
    np.savez(
        out, starts=np.array(starts), lats=np.array(lats), elapsed=elapsed, decisions=decisions,
        cpu=cpu,
    )  # fmt: skip


def run_client(
    target: str, mode: str, concurrency: int, duration: float, cpu_pid: int = 0
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.npz"
        subprocess.run(
            [PY, str(BENCH_ROUTE), "client", "--target", target, "--mode", mode,
             "--concurrency", str(concurrency), "--duration", str(duration), "--out", str(out),
             "--cpu-pid", str(cpu_pid)],
            check=True, preexec_fn=preexec_for(PIN[1] if PIN else None),
        )  # fmt: skip
        data = np.load(out)
        return {k: data[k] for k in data.files}
