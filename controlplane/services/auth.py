"""Who may call what: bearer tokens or mTLS subjects, three roles, one check per call.

``--auth-file FILE`` is YAML, a list of clients::

    - {name: ops-alice, role: write, sha256: <hex SHA-256 of her token>}
    - {name: dashboards, role: read, sha256: ...}
    - {name: agents-rack-7, role: agent, subject: agents.rack7.example}   # mTLS client cert

Only hashes are stored, so the file is no secret. With it, every RPC except the gRPC health check
needs ``authorization: Bearer TOKEN`` metadata, checked before the request is even read
(:mod:`servekit.rpc_guard`), or with mTLS a client certificate whose common
name or a subject-alternative name equals an entry's ``subject``; otherwise UNAUTHENTICATED.
Roles (:func:`required_role`): ``read`` lists and shows (ListPlans, GetPlan, DiffPlans, GetStatus,
ListAudit, GetProfile, ListNodes, reflection); ``write`` may also build, import, shadow, fit a
profile, roll out, roll back, add, remove and drain (every other admin method, including ones
added later); ``agent`` may only stream ``AgentService.Connect``, which no other role may. A
known caller in the wrong role gets PERMISSION_DENIED. The authenticated name is what the audit
records (:func:`caller_name`) and the identity an agent's nodes are bound to; a client-supplied
actor is ignored then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import structlog

from servekit.auth_file import (
    AuthFileError,
    AuthTable,
    Client,
    Role,
    bearer_token,
    load_auth_file,
    parse_auth,
    token_hash,
)
from servekit.rpc_guard import CALLER, Check

log = structlog.get_logger("controlplane.services.auth")
OPEN_SERVICES = ("/grpc.health.v1.Health/",)
READ_METHODS = frozenset(
    {
        "/cacheroute.v1.PlanService/ListPlans",
        "/cacheroute.v1.PlanService/GetPlan",
        "/cacheroute.v1.PlanService/DiffPlans",
        "/cacheroute.v1.PlanService/GetStatus",
        "/cacheroute.v1.PlanService/ListAudit",
        "/cacheroute.v1.PlanService/GetProfile",
        "/cacheroute.v1.NodeService/ListNodes",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    }
)
AGENT_METHODS = frozenset({"/cacheroute.v1.AgentService/Connect"})
# The auth file's format lives in servekit.auth_file (routers read it too); re-exported here.
__all__ = [
    "AuthFileError",
    "AuthTable",
    "Authenticator",
    "Client",
    "Role",
    "allowed",
    "caller_name",
    "load_auth_file",
    "parse_auth",
    "required_role",
    "token_hash",
]


def required_role(method: str) -> Role | None:
    """The least role that may call ``method`` (None: open to anyone)."""
    if method.startswith(OPEN_SERVICES):
        return None
    if method in AGENT_METHODS:
        return Role.AGENT
    return Role.READ if method in READ_METHODS else Role.WRITE


def allowed(role: Role, method: str) -> bool:
    """Whether a caller in ``role`` may call ``method`` (the pure role table)."""
    needed = required_role(method)
    if needed is None:
        return True
    if needed is Role.AGENT or role is Role.AGENT:
        return role is needed
    return role is Role.WRITE or needed is Role.READ


def caller_name() -> str:
    """The authenticated name of the current RPC's caller ("" without authentication)."""
    return CALLER.get()


def _subjects(context: grpc.aio.ServicerContext[Any, Any]) -> list[str]:
    auth = context.auth_context() or {}
    found = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        found += [v.decode() if isinstance(v, bytes) else str(v) for v in auth.get(key, ())]
    return found


class Authenticator:
    """Authenticates and authorizes every RPC (module docstring) as the :mod:`servekit.rpc_guard`
    check, which runs it on the call's metadata and peer before the request is read."""

    def __init__(self, table: AuthTable, on_refused: Callable[[str, str], None]) -> None:
        self._table = table
        self._on_refused = on_refused  # (method, code name) → a metric

    def check_of(self, method: str) -> Check | None:
        """The check for ``method`` (None: open to anyone, the health check)."""
        return None if required_role(method) is None else self.check

    def authenticate(
        self, token: str | None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Client | None:
        if token is not None:
            return self._table.by_hash.get(token_hash(token)) if token else None
        for subject in _subjects(context):
            client = self._table.by_subject.get(subject)
            if client is not None:
                return client
        return None

    async def check(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> str:
        token = bearer_token(context.invocation_metadata())
        client = self.authenticate(token, context)
        if client is None:
            # Who was refused, as far as known: no client name exists, so the log names the peer
            # and what it presented (issue 34: it said "client": null). The message names the
            # protocol only; each client adds its own flag (cachectl: --token-file).
            presented = "an unknown bearer token" if token else "no bearer token"
            self._refuse(
                method, grpc.StatusCode.UNAUTHENTICATED, peer=context.peer(), presented=presented
            )
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{presented}: send 'authorization: Bearer TOKEN' with a known token, or a "
                "known client certificate",
            )
        assert client is not None
        if not allowed(client.role, method):
            self._refuse(method, grpc.StatusCode.PERMISSION_DENIED, client=client.name)
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{client.name} (role {client.role}) may not call {method.rsplit('/', 1)[-1]}",
            )
        return client.name

    def _refuse(self, method: str, code: grpc.StatusCode, **who: str) -> None:
        """Count and log a refusal; ``who``: the client's name, else the peer and what it sent."""
        self._on_refused(method, code.name)
        log.info("rpc not authorized", method=method, code=code.name, **who)
