"""Who may call the Endpoint Picker: checked on the stream's metadata before its first message.

The picker had no caller identity: anyone who reached its port could name a pick's last fallback
as the endpoint that served and so eject engines, or hold bodies in the router's memory. Gateways
can authenticate the way Envoy's ``grpc_service`` allows: a token in the ext_proc stream's
initial metadata (``initial_metadata: [{key: authorization, value: "Bearer TOKEN"}]``), or a
client certificate (``--tls-client-ca``). So, with the router's ``--auth-file`` or mTLS:

* a caller the auth file names (bearer token or certificate subject, any role), or any caller
  whose certificate the client CA signed when there is no auth file, is served;
* any other caller is refused with UNAUTHENTICATED before a message is read, unless
  ``--extproc-allow-unauthenticated`` (the gateway cannot send a token; a NetworkPolicy is the
  boundary): then it is served, and its outcomes never count for passive health.

Without either, the picker is open (loopback, or ``--allow-unauthenticated``); outcomes then
count under :mod:`dataplane.health.health_feedback`'s rule (loopback peers only by default).
``cacheroute_router_extproc_refused_total`` counts refused streams.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog
from prometheus_client import CollectorRegistry, Counter

from dataplane.requests.callers import CallerNames
from servekit.auth_file import AuthTable

log = structlog.get_logger("dataplane.extproc")
_Context = grpc.aio.ServicerContext[Any, Any]
PROCESS_METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
REFUSAL = (
    "the Endpoint Picker needs a caller it knows: send 'authorization: Bearer TOKEN' in the "
    "ext_proc stream's initial metadata (Envoy: grpc_service.initial_metadata) or a client "
    "certificate"
)


class PickerIdentity:
    """The guard's check for ``Process`` (:class:`servekit.rpc_guard.RpcGuard`'s ``check_of``)."""

    def __init__(
        self,
        auth: AuthTable | None,
        *,
        mtls: bool,
        allow_unauthenticated: bool,
        registry: CollectorRegistry,
    ) -> None:
        self.required = (auth is not None or mtls) and not allow_unauthenticated
        self._auth = auth
        self._names = CallerNames(auth) if auth is not None else None
        self.refused = Counter(
            "cacheroute_router_extproc_refused",
            "ext_proc streams refused before their first message: no known token or certificate.",
            registry=registry,
        )

    def check_of(self, method: str) -> Callable[[str, _Context], Awaitable[str]] | None:
        return self.check if method == PROCESS_METHOD and self.required else None

    async def check(self, method: str, context: _Context) -> str:
        name = self.name(method, context)
        if not name:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)
        return name

    def name(self, method: str, context: Any) -> str:
        """The caller's name, or "" (counted and logged as refused): the native transport's
        check, which has no gRPC context to abort (:mod:`dataplane.extproc.native_streams`)."""
        name = self._names.name(context) if self._names is not None else _certified(context)
        if not name:
            self.refused.inc()
            log.info("picker stream refused", method=method, peer=context.peer())
        return name


def _certified(context: _Context) -> str:
    """Without an auth file, mTLS itself names the caller: its certificate's common name."""
    found = context.auth_context() or {}
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in found.get(key, ()):
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
