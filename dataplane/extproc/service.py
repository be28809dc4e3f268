"""The Endpoint Picker's gRPC servers: ``ExternalProcessor/Process`` and the GIE health services.

``--extproc-listen`` serves ``envoy.service.ext_proc.v3.ExternalProcessor`` (plus standard health
and reflection) on the router's event loop, deciding in process with the router's own
:class:`~dataplane.core.router.Router` (no RPC hop). ``--extproc-health-listen`` serves the gRPC
health services a Gateway API Inference Extension deployment probes: ``liveness`` (SERVING while
the process runs), ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor`` (SERVING only
once the router has synced its tables and loads with the store, as the router's own health).
Every router replica is active: they share one versioned table, so they agree on warm keys by
construction; there is no leader to elect.

Like every gRPC port, the picker's is registered through the guard (:mod:`servekit.rpc_guard`:
garbage is INVALID_ARGUMENT, one message is at most the body limit plus 1 MiB) and checks its
caller before the first message (:mod:`dataplane.extproc.identity`). A stream waiting for its
body's end longer than ``body_timeout_s`` is answered 408 and ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import structlog
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health_pb2

from dataplane.extproc.context import ExtProcConfig, PickerContext
from dataplane.extproc.identity import PickerIdentity
from dataplane.extproc.stream import PickerStream
from servekit.auth_file import AuthTable
from servekit.grpc_hygiene import FIXED_RECEIVE_WINDOW, ConnectionHygiene
from servekit.grpc_server import GrpcServer
from servekit.rpc_guard import RpcGuard
from servekit.tls import TlsConfig

log = structlog.get_logger("dataplane.extproc")
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"
# A gateway's connections are renewed hourly, with 5 minutes for the requests in flight; fixed
# receive windows keep unread body chunks out of gRPC core's buffers (servekit.grpc_hygiene).
GATEWAY_CONNECTIONS = ConnectionHygiene(max_age_s=3600.0, receive_window_bytes=FIXED_RECEIVE_WINDOW)
MESSAGE_SLACK_BYTES = 1024 * 1024  # one message: a body chunk (at most the body) plus headers
# What a message may hold that a picker cannot use: answered INVALID_ARGUMENT, one log line.
MALFORMED = (ValueError, TypeError, UnicodeError, KeyError, IndexError, AttributeError)


class ExternalProcessor(ext_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``Process``: one :class:`~dataplane.extproc.stream.PickerStream` per stream."""

    def __init__(self, context: PickerContext) -> None:
        self._ctx = context

    async def Process(  # noqa: N802
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        stream = PickerStream(self._ctx, self._ctx.feedback.caller(context))
        streams = self._ctx.metrics.streams
        streams.inc()
        messages = aiter(request_iterator)
        try:
            while True:
                try:
                    message = await self._next(stream, messages)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    yield stream.timed_out()
                    return
                try:
                    answers = stream.on_message(message)
                except MALFORMED as exc:
                    log.info("malformed ext_proc message", error=f"{type(exc).__name__}: {exc}")
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"malformed ext_proc message: {exc}"
                    )
                for answer in answers:
                    yield answer
                if stream.done:
                    return
        finally:
            stream.close()
            streams.dec()

    async def _next(self, stream: PickerStream, messages: AsyncIterator[Any]) -> Any:
        """The next message; TimeoutError once a body has been awaited too long."""
        if stream.waiting_since is None:
            return await anext(messages)
        left = stream.waiting_since + self._ctx.config.body_timeout_s - time.monotonic()
        async with asyncio.timeout(max(0.0, left)):
            return await anext(messages)


class ExtProcServer:
    """The ext_proc server and, when configured, the health server (module docstring)."""

    def __init__(
        self,
        context: PickerContext,
        config: ExtProcConfig,
        tls: TlsConfig | None = None,
        auth: AuthTable | None = None,
    ) -> None:
        self.config = config
        self.context = context
        self.identity = PickerIdentity(
            auth,
            mtls=tls is not None and tls.client_ca_file is not None,
            allow_unauthenticated=config.allow_unauthenticated,
            registry=context.registry,
        )
        limit = config.max_body_bytes + MESSAGE_SLACK_BYTES
        self.grpc = GrpcServer(
            config.listen,
            service_names=[EXT_PROC_SERVICE],
            tls=tls,
            max_message_bytes=limit,
            guard=RpcGuard(lambda _method: limit, self.identity.check_of),
            hygiene=GATEWAY_CONNECTIONS,
        )
        ext_grpc.add_ExternalProcessorServicer_to_server(
            ExternalProcessor(context), self.grpc.registry
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
