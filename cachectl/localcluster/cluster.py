"""The local cluster: the docker-compose topology as plain processes on this machine.

    Redis (embedded) ← control plane ← agents (one process, one agent per engine)
          ↑                                  ↓ scrape /metrics
       routers (N processes)           simulated engines (one or more processes)

:meth:`LocalCluster.start` launches, in order, an embedded Redis, the control plane, the engine
process(es) and the routers, from the launcher's main thread (see
:mod:`cachectl.localcluster.processes`); :meth:`wait_ready` reads the address each server logged,
starts the agents process, and waits until the control plane answers, every engine is healthy,
every agent's node is registered and healthy, and every router routes. :meth:`stop` stops the
agents first (they send ``leaving``), then the rest, then Redis, and is safe to call twice; the
context manager calls it on any exit, error or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cachectl.localcluster.processes import ManagedProcess, logged_values, python_module, stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, cluster_pb2, routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import EmbeddedRedis, EmbeddedRedisError
from sim.engine_model import LLAMA_70B

HOST = "127.0.0.1"
AGENT_GRACE_S = 3.0
STOP_GRACE_S = 6.0
PROBE_KEY = "localcluster-readiness-probe"
# The line each server logs once it listens, and the field holding its address.
CONTROLPLANE_SERVING = "control plane serving"  # field "listen"
ROUTER_SERVING = "router serving"  # field "address"
ENGINE_SERVING = "engine serving"  # field "url", one per engine in --listen order
KV_EVENTS = "kv events publishing"  # fields "endpoint", "replay_endpoint", in the same order


class ClusterError(RuntimeError):
    """The cluster did not start or did not do what was asked; the message says what."""


@dataclass(frozen=True)
class ClusterSpec:
    """What to run. ``engine_groups`` splits engines over processes (None: one process)."""

    engines: int = 8
    routers: int = 2
    engine_groups: tuple[tuple[int, ...], ...] | None = None
    profile: str = LLAMA_70B.name
    speedup: float = 1.0
    kv_blocks: int | None = None
    stream_interval_s: float = 0.25
    agent_interval_s: float = 0.25
    # Lenient on purpose: on a shared 2-core machine a CPU-starved engine process can stall for
    # a second, and with every engine in one process a 1 s scrape timeout would mark all of them
    # stale at once (routers then answer UNAVAILABLE). A dead engine is still seen at once: its
    # agent's next scrape is refused and reports stale. A silent agent: down after 20 intervals.
    scrape_timeout_s: float = 2.5
    node_timeout_intervals: float = 20.0
    router_report_interval_s: float = 1.0
    router_table_interval_s: float = 1.0
    router_policy: str = "cacheroute"
    pool: str = "default"
    log_level: str = "info"
    # Extra command-line options of the control plane and of each router (e.g. automatic mode's
    # --auto-interval and --guard-*, the routers' trace sampling).
    controlplane_args: tuple[str, ...] = ()
    router_args: tuple[str, ...] = ()
    # Engines publish vLLM's KV-cache events and the agents subscribe (issue 31): `cachectl
    # status` then shows each engine's residency. Off by default: it costs CPU per step.
    kv_events: bool = False

    def node_ids(self) -> list[str]:
        return [f"sim-{i}" for i in range(self.engines)]

    def groups(self) -> tuple[tuple[int, ...], ...]:
        groups = self.engine_groups or (tuple(range(self.engines)),)
        flat = sorted(i for g in groups for i in g)
        if flat != list(range(self.engines)):
            raise ValueError(f"engine_groups {groups} must cover engines 0..{self.engines - 1}")
        return groups


def _start_redis(attempts: int = 3) -> EmbeddedRedis:
    """An embedded Redis; its port is chosen before it binds, so a lost race is retried."""
    for attempt in range(attempts):
        try:
            return EmbeddedRedis().start()
        except EmbeddedRedisError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class LocalCluster:
    """Start, watch, drive and stop the local cluster (module docstring)."""

    def __init__(self, spec: ClusterSpec, log_dir: Path) -> None:
        self.spec = spec
        self.log_dir = log_dir
        self.redis: EmbeddedRedis | None = None
        self.controlplane: ManagedProcess | None = None
        self.engine_processes: list[tuple[ManagedProcess, tuple[int, ...]]] = []
        self.routers: list[ManagedProcess] = []
        self.agents: ManagedProcess | None = None
        self.controlplane_address = ""
        self.router_addresses: list[str] = []
        self.router_http_urls: list[str] = []  # each router's OpenAI-compatible front
        self.router_ids: list[str] = []
        self.engine_addresses: dict[str, str] = {}  # node id -> host:port
        self.kv_endpoints: dict[str, str] = {}  # node id -> its engine spec's kv_events keys
        self._stopped = False

    # -- start --------------------------------------------------------------------------------

    @property
    def processes(self) -> list[ManagedProcess]:
        procs = [p for p, _ in self.engine_processes] + self.routers
        if self.controlplane is not None:
            procs.insert(0, self.controlplane)
        if self.agents is not None:
            procs.append(self.agents)
        return procs

    def start(self) -> None:
        """Launch Redis, the control plane, the engines and the routers (from the main thread);
        :meth:`wait_ready` then learns their addresses and starts the agents.

        Servers bind port 0 and the launcher reads the port each one logged when it started
        serving, so no port can be taken between choosing it and binding it (with free ports
        chosen up front, a port grabbed meanwhile by any process on the machine failed a start).
        """
        spec = self.spec
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis = _start_redis()
        redis_url = self.redis.url
        log = ["--log-format", "json", "--log-level", spec.log_level]
        self.controlplane = ManagedProcess(
            "controlplane",
            python_module(
                "controlplane",
                "--listen", f"{HOST}:0",
                "--redis-url", redis_url,
                "--metrics-listen", "",
                "--load-publish-interval", str(spec.agent_interval_s),
                "--node-timeout-intervals", str(spec.node_timeout_intervals),
                "--shutdown-grace", "1",
                *spec.controlplane_args,
                *log,
            ),
            self.log_dir,
        ).start()  # fmt: skip
        for n, group in enumerate(spec.groups()):
            listen = [a for _ in group for a in ("--listen", f"{HOST}:0")]
            extra = ["--kv-blocks", str(spec.kv_blocks)] if spec.kv_blocks else []
            extra += ["--kv-events-port", "0"] if spec.kv_events else []
            proc = ManagedProcess(
                f"engines-{n}",
                python_module(
                    "simengine",
                    *listen,
                    "--profile", spec.profile,
                    "--speedup", str(spec.speedup),
                    "--stream-interval", str(spec.stream_interval_s),
                    *extra,
                    *log,
                ),
                self.log_dir,
            ).start()  # fmt: skip
            self.engine_processes.append((proc, group))
        for r in range(spec.routers):
            router_id = f"router-{r}"
            proc = ManagedProcess(
                router_id,
                python_module(
                    "dataplane",
                    "--listen", f"{HOST}:0",
                    "--redis-url", redis_url,
                    "--router-id", router_id,
                    "--policy", spec.router_policy,
                    "--seed", str(r + 1),
                    "--report-interval", str(spec.router_report_interval_s),
                    "--table-interval", str(spec.router_table_interval_s),
                    "--metrics-listen", f"{HOST}:0",
                    "--http-listen", f"{HOST}:0",
                    "--grace", "1",
                    *spec.router_args,
                    *log,
                ),
                self.log_dir,
            ).start()  # fmt: skip
            self.routers.append(proc)
            self.router_ids.append(router_id)

    async def _discover(self, deadline: float) -> None:
        """Read every server's bound address from its "serving" log line."""
        assert self.controlplane is not None
        self.controlplane_address = (
            await self._logged(self.controlplane, CONTROLPLANE_SERVING, "listen", 1, deadline)
        )[0]
        node_ids = self.spec.node_ids()
        for proc, group in self.engine_processes:
            urls = await self._logged(proc, ENGINE_SERVING, "url", len(group), deadline)
            for i, url in zip(group, urls, strict=True):
                self.engine_addresses[node_ids[i]] = url.removeprefix("http://")
            if self.spec.kv_events:
                count = len(group)
                pubs = await self._logged(proc, KV_EVENTS, "endpoint", count, deadline)
                replays = await self._logged(proc, KV_EVENTS, "replay_endpoint", count, deadline)
                for i, pub, replay in zip(group, pubs, replays, strict=True):
                    self.kv_endpoints[node_ids[i]] = f",kv_events={pub},kv_replay={replay}"
        self.router_addresses = [
            (await self._logged(proc, ROUTER_SERVING, "address", 1, deadline))[0]
            for proc in self.routers
        ]
        ports = [
            (await self._logged(proc, ROUTER_SERVING, "http_port", 1, deadline))[0]
            for proc in self.routers
        ]
        self.router_http_urls = [f"http://{HOST}:{port}" for port in ports]

    async def _logged(
        self, proc: ManagedProcess, event: str, field: str, count: int, deadline: float
    ) -> list[str]:
        """``field`` of the first ``count`` ``event`` lines of a component's JSON log."""
        while True:
            self.check_alive()
            found = logged_values(proc.log_path, event, field)
            if len(found) >= count:
                return found[:count]
            if time.monotonic() > deadline:
                raise ClusterError(f"{proc.name} did not log {event!r}; see {proc.log_path}")
            await asyncio.sleep(0.05)

    def _start_agents(self) -> None:
        spec = self.spec
        engines = [
            a
            for node in spec.node_ids()
            for a in (
                "--engine",
                f"{node}=http://{self.engine_addresses[node]}{self.kv_endpoints.get(node, '')}",
            )
        ]
        self.agents = ManagedProcess(
            "agents",
            python_module(
                "agents",
                "--controlplane", self.controlplane_address,
                "--pool", spec.pool,
                "--interval", str(spec.agent_interval_s),
                "--scrape-timeout", str(spec.scrape_timeout_s),
                *engines,
                "--log-format", "json", "--log-level", spec.log_level,
            ),
            self.log_dir,
        ).start()  # fmt: skip

    def check_alive(self) -> None:
        """Raise if any component has exited (names it and shows the end of its log)."""
        for proc in self.processes:
            proc.check()

    async def wait_ready(self, timeout_s: float = 60.0) -> float:
        """Wait until every component serves (module docstring); returns the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout_s
        await self._discover(deadline)
        if self.agents is None:
            self._start_agents()
        await self._until(self._controlplane_serving, deadline, "the control plane to serve")
        async with aiohttp.ClientSession() as session:

            async def engines_healthy() -> bool:
                return all(
                    [await self._healthy(session, a) for a in self.engine_addresses.values()]
                )

            await self._until(engines_healthy, deadline, "every engine to answer /health")
        await self._until(self._nodes_healthy, deadline, "every agent's node to report healthy")
        await self._until(self._routers_route, deadline, "every router to route")
        return time.monotonic() - started

    async def _until(
        self, check: Callable[[], Awaitable[bool]], deadline: float, what: str
    ) -> None:
        while True:
            self.check_alive()
            try:
                if await check():
                    return
            except (ClusterError, grpc.aio.AioRpcError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}; logs in {self.log_dir}")
            await asyncio.sleep(0.1)

    async def _controlplane_serving(self) -> bool:
        async with grpc.aio.insecure_channel(self.controlplane_address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

    @staticmethod
    async def _healthy(session: aiohttp.ClientSession, address: str) -> bool:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with session.get(f"http://{address}/health", timeout=timeout) as response:
            return response.status == 200

    async def _nodes_healthy(self) -> bool:
        statuses = await self.nodes()
        healthy = {s.record.node_id for s in statuses if s.load.healthy and not s.down}
        return healthy >= set(self.spec.node_ids())

    async def _routers_route(self) -> bool:
        for address in self.router_addresses:
            async with grpc.aio.insecure_channel(address) as channel:
                stub: Any = routing_pb2_grpc.RouterServiceStub(channel)
                request = routing_pb2.RouteRequest(pool=self.spec.pool, key=PROBE_KEY)
                await stub.Route(request, timeout=1.0)
        return True

    # -- the admin API ------------------------------------------------------------------------

    async def _admin(self, service: str, method: str, request: Any, timeout: float = 10.0) -> Any:
        """One admin RPC; a refusal becomes :class:`ClusterError` with the server's message."""
        async with grpc.aio.insecure_channel(self.controlplane_address) as channel:
            stub: Any = (
                admin_pb2_grpc.PlanServiceStub(channel)
                if service == "plans"
                else admin_pb2_grpc.NodeServiceStub(channel)
            )
            try:
                return await getattr(stub, method)(request, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                raise ClusterError(f"{method}: {exc.code().name}: {exc.details()}") from None

    async def nodes(self) -> list[admin_pb2.NodeStatus]:
        answer = await self._admin(
            "nodes", "ListNodes", admin_pb2.ListNodesRequest(pool=self.spec.pool)
        )
        return list(answer.nodes)

    async def status(self) -> admin_pb2.PoolStatus | None:
        answer = await self._admin(
            "plans", "GetStatus", admin_pb2.GetStatusRequest(pool=self.spec.pool)
        )
        for pool in answer.pools:
            if pool.pool == self.spec.pool:
                return pool  # type: ignore[no-any-return]
        return None

    async def build_plan(self, note: str, actor: str = "cachectl-demo") -> admin_pb2.PlanSummary:
        """Build a plan from the routers' reported rates (``cachectl plan build``, live)."""
        request = admin_pb2.BuildPlanRequest(pool=self.spec.pool, actor=actor, note=note)
        return await self._admin("plans", "BuildPlan", request)  # type: ignore[no-any-return]

    async def rollout(
        self,
        version: str,
        actor: str = "cachectl-demo",
        *,
        skip_gates: tuple[str, ...] = (),
        reason: str = "local demo",
    ) -> cluster_pb2.ActivePointer:
        """``plan rollout``; ``skip_gates`` go past those gates by name (audited with reason)."""
        request = admin_pb2.RolloutRequest(
            pool=self.spec.pool, version=version, actor=actor, reason=reason, skip_gates=skip_gates
        )
        return await self._admin("plans", "Rollout", request)  # type: ignore[no-any-return]

    async def wait_acks(
        self, generation: int, timeout_s: float = 15.0
    ) -> list[cluster_pb2.RouterAck]:
        """Wait until every router ACKed ``generation``; raises ClusterError on NACK or timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            pool = await self.status()
            acks = {a.router_id: a for a in (pool.routers if pool is not None else [])}
            mine = [acks[r] for r in self.router_ids if r in acks]
            for ack in mine:
                if ack.generation == generation and not ack.accepted:
                    raise ClusterError(
                        f"{ack.router_id} rejected generation {generation}: {ack.reason}"
                    )
            done = [a for a in mine if a.accepted and a.serving_generation >= generation]
            if len(done) == len(self.router_ids):
                return done
            if time.monotonic() > deadline:
                missing = sorted(set(self.router_ids) - {a.router_id for a in done})
                raise ClusterError(
                    f"routers {', '.join(missing)} did not ACK generation {generation}"
                )
            await asyncio.sleep(0.1)

    async def reset_caches(self, timeout_s: float = 30.0) -> None:
        """Empty every engine's prefix cache (each engine waits until it is idle)."""
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            pending = dict(self.engine_addresses)
            while pending:
                for node, address in list(pending.items()):
                    try:
                        async with session.post(f"http://{address}/reset_prefix_cache") as reply:
                            if reply.status == 200:
                                del pending[node]
                    except (aiohttp.ClientError, OSError) as exc:
                        raise ClusterError(f"engine {node} at {address}: {exc}") from exc
                if pending:
                    if time.monotonic() > deadline:
                        raise ClusterError(f"engines {', '.join(sorted(pending))} stayed busy")
                    await asyncio.sleep(0.2)

    def engine_process_of(self, node_id: str) -> ManagedProcess:
        index = self.spec.node_ids().index(node_id)
        for proc, group in self.engine_processes:
            if index in group:
                return proc
        raise KeyError(node_id)

    # -- stop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this cluster started (agents first, then the rest, then Redis)."""
        if self._stopped:
            return
        self._stopped = True
        if self.agents is not None:
            stop_all([self.agents], AGENT_GRACE_S)
        rest = [p for p in self.processes if p is not self.agents]
        stop_all(rest, STOP_GRACE_S)
        if self.redis is not None:
            self.redis.stop()

    def pids(self) -> list[int]:
        pids = [p.pid for p in self.processes if p.pid is not None]
        if self.redis is not None and self.redis.pid is not None:
            pids.append(self.redis.pid)
        return pids

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
