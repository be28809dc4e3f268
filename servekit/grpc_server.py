"""A grpc.aio server with health checking, reflection, optional TLS and graceful shutdown.

Services are registered through ``registry`` (:mod:`servekit.rpc_guard`): every handler's
request is size-checked before parsing, garbage is INVALID_ARGUMENT, and an optional check
(authentication) runs before a request is read. Health and reflection are registered the same way.

Every port gets connection caps and idle limits derived from the open-file limit
(:mod:`servekit.grpc_hygiene`); the cap is logged at start.

Shutdown follows the gRPC examples: health goes NOT_SERVING first (so load balancers stop sending),
then ``server.stop(grace)`` lets in-flight RPCs finish.

Besides the overall status ("") and one per service, two named statuses serve Kubernetes'
gRPC probes (and follow the Gateway API Inference Extension's picker convention):
``liveness`` is SERVING from start to shutdown, so only a process too wedged to answer fails it;
``readiness`` says whether the server should get traffic (a router: synced with the store; the
control plane: able to reach it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from servekit.grpc_hygiene import ConnectionHygiene, grpc_options
from servekit.rpc_guard import GuardedRegistry, RpcGuard
from servekit.tls import TlsConfig

log = structlog.get_logger("servekit.grpc_server")

LIVENESS = "liveness"
READINESS = "readiness"
LARGE_MESSAGE_BYTES = 256 * 1024 * 1024  # 1M-key tables in ImportPlan (the control plane)
DEFAULT_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", LARGE_MESSAGE_BYTES),
    ("grpc.max_send_message_length", LARGE_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
)


class GrpcServer:
    """Owns one ``grpc.aio.Server``; register servicers on ``.server`` before ``start()``."""

    def __init__(
        self,
        listen: str,
        *,
        service_names: Sequence[str],
        tls: TlsConfig | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        max_message_bytes: int = LARGE_MESSAGE_BYTES,
        guard: RpcGuard | None = None,
        hygiene: ConnectionHygiene | None = None,
    ) -> None:
        limits = grpc_options(hygiene or ConnectionHygiene())
        options = (
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
            *limits,
        )
        self.connection_cap = dict(limits)["grpc.max_allowed_incoming_connections"]
        self.server = grpc.aio.server(options=options, interceptors=list(interceptors))
        if guard is None:
            guard = RpcGuard(lambda _method: max_message_bytes)
        # Stands in for the server in generated add_*_to_server functions (duck-typed).
        self.registry: Any = GuardedRegistry(self.server, guard)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.registry)
        self._service_names = tuple(service_names)
        names = (*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
            reflection.aio.ReflectionServicer(names), self.registry
        )
        try:
            if tls is None:
                self.port = self.server.add_insecure_port(listen)
            else:
                self.port = self.server.add_secure_port(listen, tls.server_credentials())
        except RuntimeError as exc:  # grpc's "Failed to bind to address ..."
            raise OSError(
                f"cannot listen on {listen} (gRPC): the address is in use or not available "
                f"({' '.join(str(exc).split())})"
            ) from None
        if self.port == 0:
            raise OSError(
                f"cannot listen on {listen} (gRPC): the address is in use or not available"
            )
        host = listen.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"
        log.info("grpc connection limits", address=self.address, **{k[5:]: v for k, v in limits})

    async def start(self, *, serving: bool = True, ready: bool | None = None) -> None:
        """Start listening; health says SERVING, or NOT_SERVING until :meth:`set_serving`;
        ``readiness`` follows ``serving`` unless ``ready`` is given."""
        await self.server.start()
        await self.health.set(LIVENESS, _status(True))
        await self.set_serving(serving)
        if ready is not None:
            await self.set_ready(ready)

    async def set_serving(self, serving: bool) -> None:
        """Health of every service and readiness (a no-op once shutdown has begun)."""
        for name in ("", *self._service_names, READINESS):
            await self.health.set(name, _status(serving))

    async def set_ready(self, ready: bool) -> None:
        """Only the ``readiness`` status (a no-op once shutdown has begun)."""
        await self.health.set(READINESS, _status(ready))

    async def stop(self, grace_s: float = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


def _status(serving: bool) -> health_pb2.HealthCheckResponse.ServingStatus.ValueType:
    if serving:
        return health_pb2.HealthCheckResponse.SERVING
    return health_pb2.HealthCheckResponse.NOT_SERVING
