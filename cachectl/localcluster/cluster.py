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
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cachectl.localcluster.admin import ClusterAdmin
from cachectl.localcluster.commands import (
    HOST,
    agents_command,
    controlplane_command,
    engines_command,
    router_command,
)
from cachectl.localcluster.processes import ManagedProcess, logged_values, stop_all
from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import EmbeddedRedis, EmbeddedRedisError

AGENT_GRACE_S = 3.0
STOP_GRACE_S = 6.0
PROBE_KEY = "localcluster-readiness-probe"
# The line each server logs once it listens, and the field holding its address.
CONTROLPLANE_SERVING = "control plane serving"  # field "listen"
ROUTER_SERVING = "router serving"  # field "address"
ENGINE_SERVING = "engine serving"  # field "url", one per engine in --listen order
KV_EVENTS = "kv events publishing"  # fields "endpoint", "replay_endpoint", in the same order


def _start_redis(attempts: int = 3) -> EmbeddedRedis:
    """An embedded Redis; its port is chosen before it binds, so a lost race is retried."""
    for attempt in range(attempts):
        try:
            return EmbeddedRedis().start()
        except EmbeddedRedisError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class LocalCluster(ClusterAdmin):
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
        self.controlplane = ManagedProcess(
            "controlplane", controlplane_command(spec, redis_url), self.log_dir
        ).start()
        for n, group in enumerate(spec.groups()):
            proc = ManagedProcess(
                f"engines-{n}", engines_command(spec, group), self.log_dir
            ).start()
            self.engine_processes.append((proc, group))
        for r in range(spec.routers):
            router_id = f"router-{r}"
            proc = ManagedProcess(
                router_id, router_command(spec, r, router_id, redis_url), self.log_dir
            ).start()
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
        command = agents_command(
            self.spec, self.controlplane_address, self.engine_addresses, self.kv_endpoints
        )
        self.agents = ManagedProcess("agents", command, self.log_dir).start()

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
