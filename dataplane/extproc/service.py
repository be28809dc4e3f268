"""The Endpoint Picker's gRPC servers: ``ExternalProcessor/Process`` and the GIE health services.

``--extproc-listen`` serves ``envoy.service.ext_proc.v3.ExternalProcessor`` (plus standard health
and reflection) on the router's event loop, deciding in process with the router's own
:class:`~dataplane.core.router.Router` (no RPC hop). ``--extproc-health-listen`` serves the gRPC
health services a Gateway API Inference Extension deployment probes: ``liveness`` (SERVING while
the process runs), ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor`` (SERVING only
once the router has synced its tables and loads with the store, as the router's own health).
Every router replica is active: they share one versioned table, so they agree on warm keys by
construction; there is no leader to elect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import structlog
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health_pb2

from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.stream import PickerStream
from servekit.grpc_server import GrpcServer
from servekit.tls import TlsConfig

log = structlog.get_logger("dataplane.extproc")
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"


class ExternalProcessor(ext_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``Process``: one :class:`~dataplane.extproc.stream.PickerStream` per stream."""

    def __init__(self, context: PickerContext) -> None:
        self._ctx = context

    async def Process(  # noqa: N802
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        stream = PickerStream(self._ctx)
        streams = self._ctx.metrics.streams
        streams.inc()
        try:
            async for message in request_iterator:
                try:
                    answers = stream.on_message(message)
                except Exception:
                    log.exception("ext_proc message failed")
                    raise
                for answer in answers:
                    yield answer
                if stream.done:
                    return
        finally:
            stream.close()
            streams.dec()


class ExtProcServer:
    """The ext_proc server and, when configured, the health server (module docstring)."""

    def __init__(
        self, context: PickerContext, config: ExtProcConfig, tls: TlsConfig | None = None
    ) -> None:
        self.config = config
        self.grpc = GrpcServer(config.listen, service_names=[EXT_PROC_SERVICE], tls=tls)
        ext_grpc.add_ExternalProcessorServicer_to_server(
            ExternalProcessor(context), self.grpc.server
        )
        self.health: GrpcServer | None = None
        if config.health_listen is not None:
            self.health = GrpcServer(
                config.health_listen, service_names=[LIVENESS, READINESS, EXT_PROC_SERVICE]
            )

    @property
    def port(self) -> int:
        return self.grpc.port

    @property
    def health_port(self) -> int | None:
        return self.health.port if self.health is not None else None

    async def start(self, *, serving: bool) -> None:
        await self.grpc.start(serving=serving)
        if self.health is not None:
            await self.health.start(serving=serving)
            await self.health.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "endpoint picker serving",
            address=self.grpc.address,
            health_address=self.health.address if self.health is not None else None,
            ready=serving,
        )

    async def set_serving(self, serving: bool) -> None:
        """Readiness (and the ext_proc service's health) follow the router's first sync."""
        await self.grpc.set_serving(serving)
        if self.health is not None:
            await self.health.set_serving(serving)
            await self.health.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float) -> None:
        if self.health is not None:
            await self.health.stop(0.0)
        await self.grpc.stop(grace_s)
