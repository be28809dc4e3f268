"""A fleet of real llama.cpp engines behind the real CacheRoute processes, all up at once.

    Redis (embedded) ← control plane ← agents (one process, one agent per engine)
          ↑                                  ↓ scrape /metrics
       routers (one per arm, HTTP front)  llama-server × N (-np slots, -cram RAM cache)

What the real-engine benchmark (``bench/bench_real_engine.py``) and its CI test run. Every
CacheRoute component is a ``python -m`` process started by :class:`ManagedProcess` (own process
group, parent-death signal); servers bind port 0 and are found by their "serving" log line.
llama-server needs a port up front (``free_port``). One pool; every router shares it, so a plan
rolled out reaches the routers whose policy reads plans and is ignored by the others.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from cachectl.localcluster.processes import ManagedProcess, logged_values, python_module, stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import EmbeddedRedis
from servekit.processes import free_port
from tests.support.llamacpp import BENCH_MODEL, ModelShape, start_server, wait_healthy, write_model
from tests.support.timing import StartDeadline

HOST = "127.0.0.1"
POOL = "default"


@dataclass(frozen=True)
class FleetSpec:
    """The engines (``slots`` each, ``context`` tokens shared by them) and one router per policy."""

    engines: int = 4
    slots: int = 4
    context: int = 5120
    ram_cache_mib: int = 0
    threads: int = 1
    policies: tuple[str, ...] = ("flat", "cacheroute")
    model: ModelShape = BENCH_MODEL
    agent_interval_s: float = 0.25

    def node_ids(self) -> list[str]:
        return [f"llama-{i}" for i in range(self.engines)]


async def _all_route(addresses: Sequence[str]) -> bool:
    """Every router answers a ``Route`` (it has seen the pool's nodes)."""
    for address in addresses:
        async with grpc.aio.insecure_channel(address) as channel:
            stub: Any = routing_pb2_grpc.RouterServiceStub(channel)
            await stub.Route(routing_pb2.RouteRequest(pool=POOL, key="readiness"), timeout=5)
    return True


class RealFleet:
    """Start, query and stop the fleet (module docstring); a context manager stops it."""

    def __init__(self, spec: FleetSpec, binary: Path, work_dir: Path) -> None:
        self.spec = spec
        self.binary = binary
        self.work_dir = work_dir
        self.redis: EmbeddedRedis | None = None
        self.engines: list[subprocess.Popen[bytes]] = []
        self.engine_addresses: dict[str, str] = {}  # node id -> host:port
        self.controlplane: ManagedProcess | None = None
        self.agents: ManagedProcess | None = None
        self.routers: dict[str, ManagedProcess] = {}  # policy -> process
        self.router_urls: dict[str, str] = {}  # policy -> http://host:port of its HTTP front
        self.controlplane_address = ""

    def start(self) -> None:
        """Launch everything (from the main thread: the children's parent-death signal)."""
        spec, logs = self.spec, self.work_dir
        logs.mkdir(parents=True, exist_ok=True)
        model = write_model(logs / "model.gguf", shape=spec.model)
        for node in spec.node_ids():
            port = free_port()
            self.engines.append(
                start_server(
                    self.binary, model, port, logs / f"{node}.log", alias="tiny",
                    slots=spec.slots, context=spec.context,
                    ram_cache_mib=spec.ram_cache_mib, threads=spec.threads,
                )
            )  # fmt: skip
            self.engine_addresses[node] = f"{HOST}:{port}"
        self.redis = EmbeddedRedis().start()
        log = ["--log-format", "json", "--log-level", "info"]
        self.controlplane = ManagedProcess(
            "controlplane",
            python_module(
                "controlplane", "--listen", f"{HOST}:0", "--redis-url", self.redis.url,
                "--metrics-listen", "", "--load-publish-interval", str(spec.agent_interval_s),
                "--node-timeout-intervals", "40", "--shutdown-grace", "1", *log,
            ),
            logs,
        ).start()  # fmt: skip
        for policy in spec.policies:
            self.routers[policy] = ManagedProcess(
                f"router-{policy}",
                python_module(
                    "dataplane", "--listen", f"{HOST}:0", "--redis-url", self.redis.url,
                    "--router-id", f"router-{policy}", "--policy", policy,
                    "--report-interval", "1", "--table-interval", "1",
                    "--metrics-listen", f"{HOST}:0", "--http-listen", f"{HOST}:0",
                    # A CPU-starved engine may take many seconds to start answering; a retry
                    # elsewhere would move the request and spoil the measurement.
                    "--http-first-byte-timeout", "300", "--http-first-byte-floor", "300",
                    "--grace", "1", *log,
                ),
                logs,
            ).start()  # fmt: skip

    async def wait_ready(self, timeout_s: float) -> None:
        """Until engines answer /health, every node reports healthy and every router serves."""
        with StartDeadline(timeout_s) as deadline:
            await self._wait_ready(deadline)

    async def _wait_ready(self, deadline: StartDeadline) -> None:
        for address, proc in zip(self.engine_addresses.values(), self.engines, strict=True):
            port = int(address.rsplit(":", 1)[1])
            await asyncio.to_thread(wait_healthy, port, proc, deadline=deadline)
        assert self.controlplane is not None
        self.controlplane_address = await self._logged(
            self.controlplane, "control plane serving", "listen", deadline
        )
        grpc_addresses = []
        for policy, proc in self.routers.items():
            port = await self._logged(proc, "router serving", "http_port", deadline)
            self.router_urls[policy] = f"http://{HOST}:{port}"
            grpc_addresses.append(await self._logged(proc, "router serving", "address", deadline))
        engines = [
            a
            for n, addr in self.engine_addresses.items()
            for a in ("--engine", f"{n}=http://{addr}")
        ]
        self.agents = ManagedProcess(
            "agents",
            python_module(
                "agents", "--controlplane", self.controlplane_address, "--pool", POOL,
                "--interval", str(self.spec.agent_interval_s), "--scrape-timeout", "5",
                "--dialect", "llamacpp", *engines, "--log-format", "json",
            ),
            self.work_dir,
        ).start()  # fmt: skip
        while True:
            self.check_alive()
            try:
                nodes = await self.nodes()
                healthy = {n.record.node_id for n in nodes if n.load.healthy and not n.down}
                if healthy >= set(self.spec.node_ids()) and await _all_route(grpc_addresses):
                    return
            except grpc.aio.AioRpcError:
                pass
            if deadline.expired():
                raise RuntimeError(
                    f"the fleet did not come up in {deadline.describe()}; logs in {self.work_dir}"
                )
            await asyncio.sleep(0.2)

    async def _logged(
        self, proc: ManagedProcess, event: str, field: str, deadline: StartDeadline
    ) -> str:
        while True:
            proc.check()
            found = logged_values(proc.log_path, event, field)
            if found:
                return found[0]
            if deadline.expired():
                raise RuntimeError(
                    f"{proc.name} did not log {event!r} in {deadline.describe()}; "
                    f"see {proc.log_path}"
                )
            await asyncio.sleep(0.05)

    def check_alive(self) -> None:
        for proc in self.processes():
            proc.check()
        for node, engine in zip(self.engine_addresses, self.engines, strict=True):
            if engine.poll() is not None:
                raise RuntimeError(f"engine {node} exited with {engine.returncode}")

    def processes(self) -> list[ManagedProcess]:
        found = [p for p in (self.controlplane, self.agents) if p is not None]
        return found + list(self.routers.values())

    async def _admin(self, method: str, request: Any, service: str = "plans") -> Any:
        async with grpc.aio.insecure_channel(self.controlplane_address) as channel:
            stub: Any = (
                admin_pb2_grpc.PlanServiceStub(channel)
                if service == "plans"
                else admin_pb2_grpc.NodeServiceStub(channel)
            )
            return await getattr(stub, method)(request, timeout=60)

    async def nodes(self) -> list[admin_pb2.NodeStatus]:
        listed = await self._admin("ListNodes", admin_pb2.ListNodesRequest(pool=POOL), "nodes")
        return list(listed.nodes)

    async def status(self) -> admin_pb2.PoolStatus:
        answer = await self._admin("GetStatus", admin_pb2.GetStatusRequest(pool=POOL))
        (pool,) = [p for p in answer.pools if p.pool == POOL]
        return pool  # type: ignore[no-any-return]

    async def plan(self, slots_per_node: int, routers: Sequence[str]) -> admin_pb2.PlanSummary:
        """Build a plan from the routers' live rates, roll it out past the shadow gate (the
        benchmark measures the plan itself) and wait until ``routers`` serve it."""
        built = await self._admin(
            "BuildPlan",
            admin_pb2.BuildPlanRequest(
                pool=POOL, slots_per_node=slots_per_node, actor="bench", note="real engines"
            ),
        )
        pointer = await self._admin(
            "Rollout",
            admin_pb2.RolloutRequest(
                pool=POOL, version=built.metadata.version, actor="bench",
                reason="real-engine benchmark: measured against Flat-LB in the same run",
                skip_gates=["shadow"],
            ),
        )  # fmt: skip
        wanted = {f"router-{p}" for p in routers}
        with StartDeadline(60) as deadline:  # patience (tests/support/timing.py)
            while not deadline.expired():
                acks = (await self.status()).routers
                done = {
                    a.router_id
                    for a in acks
                    if a.accepted and a.serving_generation >= pointer.generation
                }
                if wanted <= done:
                    return built  # type: ignore[no-any-return]
                await asyncio.sleep(0.2)
        raise RuntimeError(
            f"routers {sorted(wanted)} did not serve generation {pointer.generation}"
        )

    def stop(self) -> None:
        if self.agents is not None:
            stop_all([self.agents], 3.0)
        stop_all([p for p in self.processes() if p is not self.agents], 6.0)
        for engine in self.engines:
            if engine.poll() is None:
                engine.send_signal(signal.SIGTERM)
        for engine in self.engines:
            try:
                engine.wait(timeout=10)
            except subprocess.TimeoutExpired:
                engine.kill()
                engine.wait(timeout=5)
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def __enter__(self) -> RealFleet:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
