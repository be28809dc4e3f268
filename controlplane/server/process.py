"""Wiring of one control-plane instance: Redis, gRPC services, metrics, leadership and loops.

Every instance serves the admin API and agent streams. Only the lease holder runs the cluster-wide
loops (each skips its tick while the instance does not lead):

| loop | interval | work |
|---|---|---|
| leader election | lease TTL / 3 (1 s) | acquire or renew the ``controlplane`` lease |
| load snapshots | ``--load-publish-interval`` (0.25 s) | one LoadSnapshot per pool |
| rate estimator | ``--rate-update-interval`` (1 s) | fold new traffic reports in, save state |
| report sweep | retention / 10 (tick to 60 s) | forget reports older than ``--report-retention`` |
| planner | ``--plan-interval`` (off by default) | build and store a plan per pool |
| live guard | 1 s | pool p99 TTFT gauges; watch and judge rollouts (``live_guard.py``) |
| automatic mode | ``--auto-interval`` (60 s) | build, shadow, roll out if it passes (auto_mode) |

Stopping: leave the lease (another instance takes over at once), stop the loops, end agent
streams without marking their nodes down (the agents reconnect elsewhere), health NOT_SERVING,
let in-flight RPCs finish within the grace period, then close Redis (and the embedded server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, agent_pb2
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from cacheroute_state.urls import redacted
from controlplane.cluster.leader import LeaderElector
from controlplane.cluster.nodes import Liveness
from controlplane.config import ControlPlaneConfig
from controlplane.core.report_checks import ReportRules, parse_networks
from controlplane.core.ttft_window import TtftWindows
from controlplane.lifecycle.live_guard import GuardSettings, LiveGuard
from controlplane.lifecycle.live_plan import PlanDefaults
from controlplane.lifecycle.residency_watch import WatchLists
from controlplane.lifecycle.shadow import ShadowBudget
from controlplane.lifecycle.verdict_gate import standard_gates
from controlplane.metrics import ControlPlaneMetrics
from controlplane.server.embedded_store import describe_store, supervise_embedded
from controlplane.server.leader_loops import plan_all, run_while_leading
from controlplane.server.leader_work import leader_work
from controlplane.services.agent_service import AgentServicer
from controlplane.services.agent_service import add_to_server as add_agent_service
from controlplane.services.auth import Authenticator, caller_name, load_auth_file
from controlplane.services.limits import limit_of
from controlplane.services.node_service import NodeServicer
from controlplane.services.plan_service import PlanServicer
from servekit.addresses import parse_host_port
from servekit.clock import Clock, wall_ms
from servekit.grpc_server import GrpcServer
from servekit.metrics_endpoint import MetricsEndpoint
from servekit.rpc_guard import RpcGuard
from servekit.tasks import cancel_all

log = structlog.get_logger("controlplane")

SERVICE_NAMES = tuple(
    d.services_by_name[name].full_name
    for d, name in (
        (admin_pb2.DESCRIPTOR, "PlanService"),
        (admin_pb2.DESCRIPTOR, "NodeService"),
        (agent_pb2.DESCRIPTOR, "AgentService"),
    )
)


class ControlPlane:
    """One instance. ``await start()``, then ``address`` is the bound gRPC address."""

    def __init__(self, config: ControlPlaneConfig, *, clock: Clock = wall_ms) -> None:
        self.config = config
        self.clock = clock  # stamps reports, plans, pointer moves and snapshots
        self.instance_id = config.resolved_instance_id()
        self.metrics = ControlPlaneMetrics()
        self.liveness = Liveness(config.node_timeout_intervals, config.report_interval_ms)
        self.defaults = PlanDefaults(
            q_cap=config.q_cap,
            slots_per_node=config.slots_per_node,
            half_life_s=config.rate_half_life_s,
            max_keys=config.rate_max_keys,
            max_churn=config.max_churn,
            cache_budget=config.cache_budget,
            byte_rank=config.byte_rank,
            prefix_sizes=config.prefix_sizes,
        )
        self.budget = ShadowBudget(
            max_requests=config.shadow_max_requests,
            seeds=config.shadow_seeds,
            iterations=config.shadow_iterations,
            recent_minutes=config.shadow_recent_minutes,
            min_samples=config.shadow_min_samples,
            policy=config.shadow_policy,
        )
        # The one gate list of every pointer move to a plan (rollout, rollback, automatic mode,
        # the live guard's rollback): controlplane.lifecycle.rollout_gates.
        self.gates = standard_gates(
            self.liveness, allow_inconclusive=config.shadow_inconclusive == "allow"
        )
        self.guard_settings = GuardSettings(
            window_s=config.guard_window_s,
            settle_s=config.guard_settle_s,
            max_regression=config.guard_max_regression,
            floor_s=config.guard_floor_s,
            min_samples=config.guard_min_samples,
            action=config.guard_action,
            all_rollouts=config.guard_all_rollouts,
        )
        # Enough history for a before-window, the settle time and an after-window.
        retention_ms = round((2 * config.guard_window_s + config.guard_settle_s + 60) * 1000)
        self.ttft = TtftWindows(retention_ms)
        self.guard: LiveGuard | None = None
        self.redis_url = config.redis_url
        self.embedded: EmbeddedRedis | None = None
        self.stores: Stores | None = None
        self.grpc: GrpcServer | None = None
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.leader: LeaderElector | None = None
        self._agents: AgentServicer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    @property
    def address(self) -> str:
        assert self.grpc is not None, "not started"
        return self.grpc.address

    async def start(self) -> None:
        cfg = self.config
        if not self.redis_url:
            data_dir = cfg.embedded_data_dir()
            self.embedded = EmbeddedRedis(
                port=cfg.embedded_redis_port, data_dir=data_dir, bind=cfg.embedded_redis_bind
            )
            self.embedded.spawn()  # on this (the loop's) thread: the parent-death signal
            await asyncio.to_thread(self.embedded.wait_ready)
            self.redis_url = self.embedded.url
            log.info(
                "started embedded redis",
                redis_url=redacted(self.redis_url),
                data_dir=str(data_dir) if data_dir else None,
                pid=self.embedded.pid,
            )
        stores = self.stores = open_stores(self.redis_url)
        self.leader = LeaderElector(
            stores.leases,
            self.instance_id,
            ttl_s=cfg.leader_lease_ttl_s,
            metrics=self.metrics,
            on_reachable=self._set_ready,
        )
        guard = RpcGuard(limit_of(cfg.max_request_bytes, cfg.max_import_bytes))
        if cfg.auth_file is not None:
            table = load_auth_file(cfg.auth_file)
            guard.check_of = Authenticator(table, self._auth_refused).check_of
            log.info(
                "authentication on",
                auth_file=str(cfg.auth_file), tokens=len(table.by_hash),
                subjects=len(table.by_subject),
            )  # fmt: skip
        self.grpc = GrpcServer(
            cfg.listen,
            service_names=SERVICE_NAMES,
            tls=cfg.tls,
            max_message_bytes=max(cfg.max_request_bytes, cfg.max_import_bytes),
            guard=guard,
        )
        self._agents = AgentServicer(
            stores,
            self.metrics,
            instance_id=self.instance_id,
            liveness=self.liveness,
            report_interval_ms=cfg.report_interval_ms,
            rules=ReportRules(parse_networks(cfg.agent_networks)),
            identity_of=lambda _context: caller_name(),
            clock=self.clock,
            watches=WatchLists(stores),
        )
        add_agent_service(self._agents, self.grpc.registry)
        self.guard = LiveGuard(
            stores, self.ttft, self.guard_settings, self.metrics, gates=self.gates
        )
        admin_pb2_grpc.add_PlanServiceServicer_to_server(
            PlanServicer(
                stores,
                self.metrics,
                defaults=self.defaults,
                liveness=self.liveness,
                instance_id=self.instance_id,
                clock=self.clock,
                store=self.store_description(),
                budget=self.budget,
                ttft_of=self.guard.pool_p99,
                gates=self.gates,
                retention=self.config.plan_retention,
            ),
            self.grpc.registry,
        )
        admin_pb2_grpc.add_NodeServiceServicer_to_server(
            NodeServicer(stores, self.metrics, self.liveness, self.clock), self.grpc.registry
        )
        if cfg.metrics_listen:
            host, port = parse_host_port(cfg.metrics_listen)
            self.metrics_endpoint = MetricsEndpoint(self.metrics.registry, host, port)
        await self.grpc.start(ready=False)  # ready once the first lease call reaches the store
        self._start_loops()
        if self.embedded is not None:
            self._tasks.append(asyncio.create_task(self._supervise_embedded(), name="redis"))
        log.info(
            "control plane serving",
            listen=self.address,
            instance=self.instance_id,
            redis_url=redacted(self.redis_url),
            embedded_redis=self.embedded is not None,
            metrics=self.metrics_endpoint.url if self.metrics_endpoint else None,
        )

    async def _set_ready(self, reachable: bool) -> None:
        """gRPC ``readiness``: SERVING while this instance reaches the store."""
        if self.grpc is not None:
            await self.grpc.set_ready(reachable)
        if reachable:
            log.info("store reachable; readiness SERVING", redis_url=redacted(self.redis_url))
        else:
            log.warning(
                "store unreachable; readiness NOT_SERVING", redis_url=redacted(self.redis_url)
            )

    def store_description(self) -> str:
        """The store as `cachectl status` shows it (never with a password)."""
        return describe_store(self.redis_url, self.embedded)

    async def _supervise_embedded(self) -> None:
        """Restart the embedded Redis when it dies (same port, same data): clients reconnect."""
        assert self.embedded is not None
        await supervise_embedded(self.embedded, lambda: self._stopping)

    def _auth_refused(self, method: str, code: str) -> None:
        self.metrics.auth_refusals.labels(method.rsplit("/", 1)[-1], code).inc()

    def _start_loops(self) -> None:
        assert self.leader is not None and self.stores is not None and self.guard is not None
        work = leader_work(
            self.config,
            self.stores,
            metrics=self.metrics,
            liveness=self.liveness,
            ttft=self.ttft,
            clock=self.clock,
            guard=self.guard,
            defaults=self.defaults,
            gates=self.gates,
            budget=self.budget,
            plan_all=self._plan_all,
        )
        self._tasks.append(asyncio.create_task(self.leader.run(), name="leader"))
        for name, interval_s, tick in work:
            self._spawn(name, interval_s, tick)

    def _spawn(
        self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]
    ) -> None:
        self._tasks.append(
            asyncio.create_task(self._leader_loop(name, interval_s, work), name=name)
        )

    async def _leader_loop(
        self, name: str, interval_s: float, work: Callable[[int], Awaitable[object]]
    ) -> None:
        """Run ``work(term)`` every ``interval_s`` while this instance leads (fixed rate)."""
        assert self.leader is not None
        await run_while_leading(
            self.leader, self.metrics, name, interval_s, work, lambda: self._stopping
        )

    async def _plan_all(self, term: int) -> None:
        assert self.stores is not None
        await plan_all(
            self.stores,
            defaults=self.defaults,
            liveness=self.liveness,
            metrics=self.metrics,
            clock=self.clock,
        )

    async def stop(self) -> None:
        """Graceful stop (see the module docstring); safe to call twice."""
        self._stopping = True
        await cancel_all(self._tasks)
        self._tasks.clear()
        if self.leader is not None:
            await self.leader.release()
        if self._agents is not None:
            self._agents.close()
        if self.grpc is not None:
            await self.grpc.stop(self.config.grace_s)
            self.grpc = None
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
            self.metrics_endpoint = None
        if self.stores is not None:
            await self.stores.close()
            self.stores = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None
        log.info("control plane stopped", instance=self.instance_id)
