"""The soak's processes: Redis, a control plane, four simulated engines, their agents, a router.

Apart from the load and the rollouts (``bench_soak.py``) so that what runs, and how each process
is started, found ready and stopped, reads in one place.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
from soak_http import served_model

from cachectl.localcluster.processes import ManagedProcess, logged_values, python_module, stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import EmbeddedRedis

HOST = "127.0.0.1"
LOG = ("--log-format", "json", "--log-level", "warning")


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def logged(proc: ManagedProcess, event: str, field: str, count: int = 1) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        proc.check()
        found = logged_values(proc.log_path, event, field)
        if len(found) >= count:
            return found[:count]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} did not log {event!r}")
        await asyncio.sleep(0.1)


class Cluster:
    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.redis = EmbeddedRedis().start()
        self.procs: list[ManagedProcess] = []
        info = [*LOG[:2], "--log-level", "info"]
        self.cp = self._start(
            "controlplane",
            "controlplane",
            "--listen",
            f"{HOST}:0",
            "--redis-url",
            self.redis.url,
            "--metrics-listen",
            "",
            *info,
        )
        self.engines = self._start(
            "engines",
            "simengine",
            *[a for _ in range(4) for a in ("--listen", f"{HOST}:0")],
            "--speedup",
            "20",
            *info,
        )
        self.router = self._start("router", "dataplane", "--listen", f"{HOST}:0", "--redis-url",
                                  self.redis.url, "--router-id", "soak", "--metrics-listen", "",
                                  "--report-interval", "2", "--http-listen", f"{HOST}:0",
                                  *info)  # fmt: skip
        self.cp_address = self.router_address = self.front_url = self.model = ""

    def _start(self, name: str, module: str, *args: str) -> ManagedProcess:
        proc = ManagedProcess(name, python_module(module, *args), self.log_dir).start()
        self.procs.append(proc)
        return proc

    async def ready(self) -> None:
        self.cp_address = (await logged(self.cp, "control plane serving", "listen"))[0]
        urls = await logged(self.engines, "engine serving", "url", 4)
        self.router_address = (await logged(self.router, "router serving", "address"))[0]
        self.front_url = "http://" + (await logged(self.router, "http front serving", "address"))[0]
        specs = [a for i, u in enumerate(urls) for a in ("--engine", f"sim-{i}={u}")]
        self._start("agents", "agents", "--controlplane", self.cp_address, *specs, *LOG)
        async with grpc.aio.insecure_channel(self.cp_address) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            deadline = time.monotonic() + 60
            while True:
                reply = await nodes.ListNodes(admin_pb2.ListNodesRequest(pool="default"))
                if len(reply.nodes) == 4 and all(n.load.healthy for n in reply.nodes):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the engines never became healthy")
                await asyncio.sleep(0.2)
        await self._routing(deadline)
        self.model = await served_model(self.front_url, deadline)

    async def _routing(self, deadline: float) -> None:
        """Until the router answers: it learns the nodes from the next load snapshot and until
        then rightly says the pool has no destinations yet (a start-up wait, not an error)."""
        async with grpc.aio.insecure_channel(self.router_address) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            while True:
                try:
                    await stub.Route(routing_pb2.RouteRequest(key="ready"), timeout=5)
                    return
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        stop_all(list(reversed(self.procs)), grace_s=5.0)
        self.redis.stop()
