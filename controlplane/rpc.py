"""Thin-servicer plumbing: run a plain function, count the RPC, map domain errors to statuses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import structlog

from cacheroute_state.interfaces import (
    ConflictError,
    PlanMismatchError,
    PlanNotFoundError,
    StoreUnavailableError,
)
from controlplane.auth import caller_name
from controlplane.controlplane_metrics import ControlPlaneMetrics
from controlplane.errors import (
    NodeIdTakenError,
    NodeNotFoundError,
    NotBuiltError,
    PreconditionError,
    ShuttingDownError,
    StreamSupersededError,
)

T = TypeVar("T")
log = structlog.get_logger("controlplane.rpc")

_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (PlanNotFoundError, grpc.StatusCode.NOT_FOUND),
    (NodeNotFoundError, grpc.StatusCode.NOT_FOUND),
    (ConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanMismatchError, grpc.StatusCode.ALREADY_EXISTS),
    (NodeIdTakenError, grpc.StatusCode.ALREADY_EXISTS),
    (StreamSupersededError, grpc.StatusCode.ABORTED),
    (ShuttingDownError, grpc.StatusCode.UNAVAILABLE),
    (StoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (NotBuiltError, grpc.StatusCode.UNIMPLEMENTED),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and one-line message an error becomes on the wire."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code, str(exc) or kind.__name__
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"


async def handle(
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
        await context.abort(code, message)
    metrics.rpcs.labels(method, "OK").inc()
    return result


def actor_of(requested: str, context: grpc.aio.ServicerContext[object, object]) -> str:
    """Who did it: the authenticated caller (``--auth-file``; a client-named actor is ignored
    then), else the actor the client named, else its peer address."""
    return caller_name() or requested.strip() or f"anonymous@{context.peer()}"
