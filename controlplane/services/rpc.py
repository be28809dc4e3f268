"""Thin-servicer plumbing: run a plain function, count the RPC, map domain errors to statuses.

A unary admin RPC is written once, as what it does::

    @rpc
    async def ListPlans(self, request, context):  # noqa: N802
        return await list_plans(self._stores, request.pool, request.limit)

:func:`rpc` counts it under its method name in ``controlplane_rpcs_total`` and turns a domain
error into the status of :func:`status_for` (the servicer needs a ``_metrics`` attribute). An
error with a ``status_details`` message (e.g. ``ActivationRefused``) sends it as typed details
in the ``grpc-status-details-bin`` trailer (:mod:`servekit.status_details`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import grpc
import structlog
from google.protobuf.message import Message

from cacheroute_state.interfaces import (
    ConflictError,
    CorruptRecordError,
    PlanInUseError,
    PlanMismatchError,
    PlanNotFoundError,
    StoreUnavailableError,
)
from controlplane.cluster.nodes import InvalidAddressError
from controlplane.core.message_bounds import BoundsError, check_bounds
from controlplane.core.planner import PlanError
from controlplane.core.report_checks import InvalidReportError
from controlplane.errors import (
    InvalidArgumentError,
    NodeIdTakenError,
    NodeNotFoundError,
    NotBuiltError,
    PreconditionError,
    ShuttingDownError,
    StreamSupersededError,
)
from controlplane.metrics import ControlPlaneMetrics
from controlplane.services.auth import caller_name
from dataplane.core.names import InvalidNameError
from dataplane.core.policies.registry import UnknownPolicyError
from dataplane.core.protobuf_fields import WireError
from dataplane.core.table import TableError
from servekit.status_details import details_trailer

_OWN_LIMIT = frozenset({"table"})
T = TypeVar("T")
Req = TypeVar("Req")
Context = grpc.aio.ServicerContext[Any, Any]
log = structlog.get_logger("controlplane.services.rpc")

# The request errors the caller must fix; any other ValueError is a bug (INTERNAL, logged).
INVALID_ARGUMENT_ERRORS: tuple[type[ValueError], ...] = (
    InvalidArgumentError,
    BoundsError,
    InvalidNameError,
    TableError,
    WireError,
    PlanError,
    InvalidReportError,
    InvalidAddressError,
    UnknownPolicyError,
)

_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (PlanNotFoundError, grpc.StatusCode.NOT_FOUND),
    (NodeNotFoundError, grpc.StatusCode.NOT_FOUND),
    (ConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (CorruptRecordError, grpc.StatusCode.FAILED_PRECONDITION),  # names the record
    (PlanInUseError, grpc.StatusCode.FAILED_PRECONDITION),
    (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanMismatchError, grpc.StatusCode.ALREADY_EXISTS),
    (NodeIdTakenError, grpc.StatusCode.ALREADY_EXISTS),
    (StreamSupersededError, grpc.StatusCode.ABORTED),
    (ShuttingDownError, grpc.StatusCode.UNAVAILABLE),
    (StoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (NotBuiltError, grpc.StatusCode.UNIMPLEMENTED),
    *((kind, grpc.StatusCode.INVALID_ARGUMENT) for kind in INVALID_ARGUMENT_ERRORS),
)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and one-line message an error becomes on the wire."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code, str(exc) or kind.__name__
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


async def _handle(
    metrics: ControlPlaneMetrics,
    method: str,
    context: grpc.aio.ServicerContext[object, object],
    work: Callable[[], Awaitable[T]],
) -> T:
    """Await ``work()``; on a domain error abort the RPC with its mapped status."""
    try:
        result = await work()
    except Exception as exc:
        code, message = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.exception("rpc failed", method=method)
        else:
            log.info("rpc refused", method=method, code=code.name, message=message)
        metrics.rpcs.labels(method, code.name).inc()
        details = getattr(exc, "status_details", None)
        if isinstance(details, Message):
            await context.abort(code, message, details_trailer(code, message, [details]))
        await context.abort(code, message)
    metrics.rpcs.labels(method, "OK").inc()
    return result


class Metered(Protocol):
    """A servicer that counts its RPCs."""

    _metrics: ControlPlaneMetrics


S = TypeVar("S", bound=Metered)


def rpc(
    method: Callable[[S, Req, Context], Awaitable[T]],
) -> Callable[[S, Req, Context], Coroutine[Any, Any, T]]:
    """A unary servicer method, counted and error-mapped by :func:`handle` under its own name."""
    name = method.__name__

    @functools.wraps(method)
    async def counted(self: S, request: Req, context: Context) -> T:
        async def work() -> T:
            if isinstance(request, Message):  # every string and list bounded (ImportPlan's
                check_bounds(request, exempt=_OWN_LIMIT)  # table has its own size limit)
            return await method(self, request, context)

        return await _handle(self._metrics, name, context, work)

    return counted


UNVERIFIED = "unverified:"


def actor_of(requested: str, context: grpc.aio.ServicerContext[object, object]) -> str:
    """Who did it: the authenticated caller (``--auth-file``; a client-named actor is ignored
    then). Without authentication anyone may claim any name, so the one the client named is
    recorded as a claim, ``unverified:NAME``; with none, its peer address (``anonymous@PEER``)."""
    authenticated = caller_name()
    if authenticated:
        return authenticated
    claimed = requested.strip()
    return f"{UNVERIFIED}{claimed}" if claimed else f"anonymous@{context.peer()}"
