"""One router process: the gRPC server, the Redis loops, the reporters, start and stop.

Start: connect, do one full sync (pools, each pool's pointer → table, each pool's load snapshot)
bounded by ``startup_timeout_s``, then serve, so a router started after a rollout answers from the
active table from its first request. If Redis is away the router listens but its gRPC health says
NOT_SERVING (a load balancer keeps it out), Route answers UNAVAILABLE naming the store it waits
for, a warning says so every ``WAITING_LOG_S``, and the loops keep trying; after the first full
sync it is SERVING and stays so through later store outages (it routes on what it holds): see
:mod:`dataplane.server.first_sync`.

Loops (all on the server's event loop; none of them is on a decision's path):

* hints: subscribe to every pool's hints; "table" → the table watcher, "load" → the load watcher,
  "pools"/"resync" → everything (:mod:`dataplane.server.hints`).
* table watcher (every ``table_interval_s``, default 2 s, and on hints), ACK heartbeat
  (``ack_interval_s``, 5 s); see :mod:`dataplane.sync.table_watcher`.
* load watcher (every ``load_interval_s``, 1 s, besides the pushed snapshots).
* traffic reports (``report_interval_s``, 5 s) and trace samples (``sample_interval_s``, 1 s).
* passive health: ejected destinations return when their time is up (every 0.25 s);
  see :mod:`dataplane.health.passive_health`.
* active probes (``probes.interval_s``, 2 s; 0: off): TCP connects to the destinations of pools
  whose snapshots are stale; see :mod:`dataplane.health.active_probe`.

With ``http`` set, the OpenAI-compatible front (:mod:`dataplane.http_front`) serves on the same
event loop and decides with the same router; it starts after gRPC and stops before it. With
``extproc`` set, so does the Envoy ext_proc Endpoint Picker (:mod:`dataplane.extproc`), whose
readiness follows the router's first sync.

Stop: health NOT_SERVING, ``server.stop(grace)``, cancel the loops, a last flush of reports and
samples (bounded by a short timeout), close Redis and the metrics endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from cacheroute.v1 import routing_pb2
from cacheroute_state import Stores, open_stores
from dataplane.core.router import Router
from dataplane.extproc.context import PickerContext
from dataplane.extproc.native_bridge import NativeExtProcServer
from dataplane.extproc.service import ExtProcServer
from dataplane.health.active_probe import ActiveProber
from dataplane.health.health_feedback import HealthFeedback, allow_listed
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.callers import CallerNames
from dataplane.requests.holds import Holds, InFlightCollector
from dataplane.requests.planning_gate import PlanningGate
from dataplane.rpc.servicer import RouterServicer, add_to_server
from dataplane.server.config import RouterConfig
from dataplane.server.first_sync import FirstSync
from dataplane.server.hints import hint_loop
from dataplane.sync.load_watcher import LoadWatcher
from dataplane.sync.table_watcher import TableWatcher
from dataplane.telemetry.router_metrics import RouterMetrics
from dataplane.telemetry.sampler import Sampler, SampleReporter
from dataplane.telemetry.served_metrics import ServedMetrics
from dataplane.telemetry.tracing import spans_from_environment
from dataplane.telemetry.traffic import TrafficReporter
from servekit.addresses import parse_host_port
from servekit.grpc_hygiene import FIXED_RECEIVE_WINDOW, ConnectionHygiene
from servekit.grpc_server import GrpcServer
from servekit.metrics_endpoint import MetricsEndpoint
from servekit.tasks import cancel_all

if TYPE_CHECKING:  # imported where the front starts: aiohttp only with --http-listen
    from dataplane.http_front.app import HttpFront

log = structlog.get_logger("dataplane.server")
SERVICE_NAME = routing_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
# Route callers' connections are renewed hourly (a GOAWAY, 5 min for calls in flight); fixed
# receive windows bound what a caller can park in the router (servekit.grpc_hygiene).
ROUTER_CONNECTIONS = ConnectionHygiene(max_age_s=3600.0, receive_window_bytes=FIXED_RECEIVE_WINDOW)


async def _supervised(name: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run ``loop`` forever: a bug that escapes it is logged and the loop restarts a second later,
    so one bad hint or report cannot silently stop a router from converging."""
    while True:
        try:
            await loop()
        except Exception:
            log.exception("loop failed; restarting it", loop=name)
            await asyncio.sleep(1.0)


class RouterServer:
    """Wires a :class:`~dataplane.core.router.Router` to gRPC, Redis and Prometheus."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.metrics = RouterMetrics(config.policy)
        self.sampler = Sampler(
            config.sample_rate,
            router_id=config.router_id,
            capacity=config.sample_buffer,
            seed=config.seed,
            on_dropped=lambda n: self.metrics.dropped("samples", n),
            floor_per_s=config.sample_floor,
        )
        self.router = Router(
            policy=config.policy,
            seed=config.seed,
            correction_horizon_s=config.correction_horizon_s,
            top_keys=config.top_keys,
            sampler=self.sampler,
            pool_metrics=self.metrics.for_pool,
            panic_threshold=config.panic_threshold,
            load_max_age_s=config.load_max_age_s,
            outliers=config.outliers,
            probes=config.probes,
        )
        self.metrics.watch(self.router)
        self.health = PassiveHealth(self.router, self.metrics.registry)
        self.prober = ActiveProber(self.router, config.probes, self.metrics.registry)
        self.holds = Holds(self.router)
        self.metrics.registry.register(InFlightCollector(self.holds))
        self.served = ServedMetrics(self.metrics.registry, spans_from_environment())
        self.http: HttpFront | None = None
        if config.http is not None:
            from dataplane.http_front.app import HttpFront  # noqa: PLC0415 - aiohttp only then

            self.http = HttpFront(
                self.router,
                self.holds,
                config.http,
                self.metrics.registry,
                self.health,
                self.served,
            )
        mtls = config.tls is not None and config.tls.client_ca_file is not None
        feedback = HealthFeedback(
            self.router,
            self.health,
            allow_listed(
                CallerNames(config.auth).name,
                config.health_feedback_from,
                authenticated=config.auth is not None or mtls,
                anonymous=config.health_feedback_anonymous,
            ),
            self.metrics.registry,
            config.health_feedback_share,
        )
        self.extproc: ExtProcServer | NativeExtProcServer | None = None
        if config.extproc is not None:
            context = PickerContext(
                self.router,
                self.holds,
                self.health,
                self.served,
                config.extproc,
                self.metrics.registry,
                feedback,
            )
            if config.extproc.native is not None:
                self.extproc = NativeExtProcServer(context, config.extproc, config.auth)
            else:
                self.extproc = ExtProcServer(context, config.extproc, config.tls, config.auth)
        self.stores: Stores = open_stores(config.redis_url)
        self.grpc = GrpcServer(
            config.listen,
            service_names=[SERVICE_NAME],
            tls=config.tls,
            max_message_bytes=config.max_message_bytes,
            hygiene=ROUTER_CONNECTIONS,
        )
        planning = None
        if PlanningGate.enabled(config.auth, config.planning_rate_limit):
            planning = PlanningGate(config.auth, config.planning_rate_limit, self.metrics.registry)
        servicer = RouterServicer(
            self.router, self.metrics, config.policy, self.holds, self.health, planning, feedback
        )
        add_to_server(servicer, self.grpc.registry)
        self.address = self.grpc.address
        self.tables = TableWatcher(
            self.router,
            self.stores.plans,
            self.stores.cluster,
            self.metrics,
            router_id=config.router_id,
            listen_address=self.address,
            interval_s=config.table_interval_s,
            ack_interval_s=config.ack_interval_s,
            fetch=self.stores.fetch_table,
            decode_nice=config.decode_nice,
        )
        self.loads = LoadWatcher(
            self.router, self.stores.cluster, self.metrics, interval_s=config.load_interval_s,
            affinity=self.served.affinity,
        )  # fmt: skip
        self.traffic = TrafficReporter(
            self.stores.telemetry,
            lambda: [(name, state.traffic) for name, state in self.router.pools.items()],
            router_id=config.router_id,
            interval_s=config.report_interval_s,
            on_dropped=lambda n: self.metrics.dropped("traffic", n),
            node_ttft=self.served.node_ttft,
        )
        self.samples = SampleReporter(
            self.stores.telemetry,
            self.sampler,
            interval_s=config.sample_interval_s,
            on_dropped=lambda n: self.metrics.dropped("samples", n),
        )
        self.first_sync = FirstSync(
            self.router, self.tables, self.loads, config.redis_url, config.startup_timeout_s
        )
        self.metrics_endpoint: MetricsEndpoint | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.hints_connected = asyncio.Event()

    async def _hints(self) -> None:
        await hint_loop(self.stores.hints, self.tables, self.loads, self.hints_connected)

    @property
    def port(self) -> int:
        return self.grpc.port

    @property
    def synced(self) -> bool:
        """Whether a full sync of tables and loads with the store has succeeded once."""
        return self.first_sync.synced

    async def start(self) -> None:
        await self.initial_sync()
        if self.config.metrics_listen is not None:
            host, port = parse_host_port(self.config.metrics_listen)
            self.metrics_endpoint = MetricsEndpoint(self.metrics.registry, host, port)
        synced = self.synced
        if not synced:
            self.router.not_synced = self.first_sync.not_synced_text()
        await self.grpc.start(serving=synced)
        if self.http is not None:
            await self.http.start()
        if self.extproc is not None:
            await self.extproc.start(serving=synced)
        loops: dict[str, Callable[[], Awaitable[None]]] = {
            "hints": self._hints,
            "tables": self.tables.run,
            "loads": self.loads.run,
            "traffic": self.traffic.run,
            "samples": self.samples.run,
            "outliers": self.health.run,
        }
        if self.config.probes.enabled:
            loops["probes"] = self.prober.run
        if not synced:
            loops["first-sync"] = self._serve_once_synced
        for name, loop in loops.items():
            self._tasks.append(asyncio.create_task(_supervised(name, loop), name=name))
        log.info(
            "router serving",
            address=self.address,
            router_id=self.config.router_id,
            policy=self.config.policy,
            metrics_port=self.metrics_endpoint.port if self.metrics_endpoint else None,
            http_port=self.http.port if self.http else None,
            extproc_port=self.extproc.port if self.extproc else None,
            pools=sorted(self.router.pools),
            health="SERVING" if synced else "NOT_SERVING",
        )

    async def _serve_once_synced(self) -> None:
        await self.first_sync.wait(self._set_serving)

    async def _set_serving(self) -> None:
        await self.grpc.set_serving(True)
        if self.extproc is not None:
            await self.extproc.set_serving(True)

    async def initial_sync(self) -> None:
        """Pools, tables and loads once, before serving; bounded so a dead Redis cannot block."""
        await self.first_sync.initial()

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.extproc is not None:
            await self.extproc.stop(self.config.grace_s)
        await self.grpc.stop(self.config.grace_s)
        pending = await cancel_all(self._tasks, timeout_s=self.config.grace_s + 1.0)
        for task in pending:  # a loop that ignores every cancel must not hang stop
            log.error("loop did not stop", task=repr(task))
        self._tasks.clear()
        for flush in (self.traffic.flush, self.samples.flush):  # last reports, bounded
            with contextlib.suppress(Exception):
                await flush(timeout_s=1.0)
        self.tables.close()
        await self.stores.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        log.info("router stopped", router_id=self.config.router_id)
