"""AgentService: the thin gRPC adapter over :mod:`controlplane.cluster.agent_sessions`.

The first report joins, later ones are heartbeats, ``leaving`` or the end of the stream leaves.
When this instance shuts down, open streams end with UNAVAILABLE *without* marking their nodes
down: the agents reconnect to another instance, and the timeout covers those that do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from cacheroute.v1 import agent_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import StoreError
from controlplane.cluster.agent_sessions import AgentSession, join
from controlplane.cluster.nodes import Liveness
from controlplane.core.report_checks import NO_RULES, InvalidReportError, ReportRules
from controlplane.errors import InvalidArgumentError, ShuttingDownError
from controlplane.lifecycle.residency_watch import WatchLists, WatchSender, fill_directive
from controlplane.metrics import ControlPlaneMetrics
from controlplane.services.rpc import status_for
from servekit.clock import Clock, wall_ms

log = structlog.get_logger("controlplane.agents")


class AgentServicer:
    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        *,
        instance_id: str,
        liveness: Liveness,
        report_interval_ms: int,
        rules: ReportRules = NO_RULES,
        identity_of: Callable[[grpc.aio.ServicerContext[Any, Any]], str] = lambda _: "",
        clock: Clock = wall_ms,
        watches: WatchLists | None = None,
    ) -> None:
        self._clock = clock
        self._watches = watches
        self._stores = stores
        self._rules = rules
        self._identity_of = identity_of
        self._metrics = metrics
        self._instance_id = instance_id
        self._liveness = liveness
        self._report_interval_ms = report_interval_ms
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every open stream (this instance is stopping)."""
        self._closing.set()

    async def _next_report(self, reports: AsyncIterator[bytes]) -> agent_pb2.NodeReport | None:
        """The next report, None at the stream's end; ShuttingDownError once close() was called;
        InvalidArgumentError (INVALID_ARGUMENT) for bytes that are not a NodeReport."""
        read = asyncio.ensure_future(anext(reports, None))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({read, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not read.done():
                read.cancel()
        if read.done() and not read.cancelled():
            data = read.result()
            if data is None:
                return None
            try:
                return agent_pb2.NodeReport.FromString(data)
            except DecodeError as exc:
                raise InvalidArgumentError(
                    f"malformed NodeReport ({len(data)} bytes): {exc}"
                ) from None
        raise ShuttingDownError("control-plane instance is shutting down; reconnect")

    async def _handle(
        self,
        session: AgentSession | None,
        report: agent_pb2.NodeReport,
        stream_id: str,
        identity: str,
    ) -> tuple[AgentSession, agent_pb2.AgentDirective | None]:
        now = self._clock()
        if session is None:
            session = await join(
                self._stores,
                report,
                stream_id=stream_id,
                now_ms=now,
                liveness=self._liveness,
                report_interval_ms=self._report_interval_ms,
                rules=self._rules,
                identity=identity,
            )
            log.info(
                "agent joined",
                pool=session.pool, node=session.node_id, stream=stream_id, identity=identity,
            )  # fmt: skip
            return session, session.directive(f"joined pool {session.pool} as {session.node_id}")
        return session, await session.heartbeat(report, now)

    async def _with_watch(
        self,
        session: AgentSession,
        sender: WatchSender,
        directive: agent_pb2.AgentDirective | None,
    ) -> agent_pb2.AgentDirective | None:
        """``directive`` with the node's planned-key watch when it changed (only for agents
        that report KV-event residency; others never see a watch)."""
        if self._watches is None or not session.last_report.HasField("residency"):
            return directive
        version, watch = await self._watches.for_node(session.pool, session.node_id, self._clock())
        if not sender.changed(version, watch):
            return directive
        out = directive if directive is not None else session.directive("")
        fill_directive(out, version, watch)
        return out

    async def Connect(  # noqa: N802 - the gRPC method name
        self,
        request_iterator: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[agent_pb2.AgentDirective]:
        stream_id = f"{self._instance_id}/{uuid.uuid4().hex[:12]}"
        session: AgentSession | None = None
        sender = WatchSender()
        code = "OK"
        identity = self._identity_of(context)
        self._metrics.agent_streams.inc()
        try:
            reports = aiter(request_iterator)
            while True:
                try:
                    report = await self._next_report(reports)
                    if report is None:
                        break
                    self._metrics.agent_reports.inc()
                    session, directive = await self._handle(session, report, stream_id, identity)
                    directive = await self._with_watch(session, sender, directive)
                    if directive is not None:
                        yield directive
                    if report.leaving:
                        break
                except Exception as exc:
                    status, message = status_for(exc)
                    code = status.name
                    if isinstance(exc, InvalidReportError):
                        self._metrics.agent_reports_rejected.labels(exc.reason).inc()
                    log.info(
                        "agent stream refused",
                        stream=stream_id, code=code, message=message,
                        reason=getattr(exc, "reason", None), identity=identity,
                    )  # fmt: skip
                    await context.abort(status, message)
        finally:
            self._metrics.agent_streams.dec()
            self._metrics.rpcs.labels("Connect", code).inc()
            if session is not None and not self._closing.is_set():
                with contextlib.suppress(StoreError):
                    await asyncio.shield(session.leave(self._clock()))
                log.info("agent left", pool=session.pool, node=session.node_id, stream=stream_id)


def add_to_server(servicer: AgentServicer, server: grpc.aio.Server) -> None:
    """Register ``AgentService`` with reports parsed in the servicer (not by gRPC's
    deserializer, which answers malformed bytes with INTERNAL and a traceback)."""
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.Connect,
        request_deserializer=_identity,
        response_serializer=agent_pb2.AgentDirective.SerializeToString,
    )
    service = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
    handlers = {"Connect": handler}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


def _identity(data: bytes) -> bytes:
    return data
