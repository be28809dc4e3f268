"""Malformed admin requests are INVALID_ARGUMENT, not INTERNAL with a traceback.

gRPC runs a handler's request deserializer before any servicer code; when it raises (bytes that
are not the request message), grpc.aio logs a traceback and answers INTERNAL. This interceptor
wraps every unary-request handler's deserializer: a failure becomes a marker the wrapped
behavior turns into INVALID_ARGUMENT with one log line. (AgentService parses its stream's
reports itself: :mod:`controlplane.services.agent_service`.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import structlog

log = structlog.get_logger("controlplane.services.decode_guard")

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler


class _Malformed:
    __slots__ = ("error", "size")

    def __init__(self, size: int, error: Exception) -> None:
        self.size = size
        self.error = error


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or anything a parser raises on garbage
            return _Malformed(len(data), exc)

    return decode


class DecodeGuard(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        for kind, make in (
            ("unary_unary", grpc.unary_unary_rpc_method_handler),
            ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ):
            inner = getattr(handler, kind)
            if inner is None:
                continue
            streaming = kind == "unary_stream"
            return make(
                _stream_behavior(method, inner) if streaming else _behavior(method, inner),
                request_deserializer=_safe(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


async def _refuse(method: str, request: _Malformed, context: Any) -> None:
    log.info("malformed request", method=method, size=request.size, error=str(request.error)[:80])
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"malformed {method.rsplit('/', 1)[-1]} request ({request.size} bytes)",
    )


def _behavior(method: str, inner: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def behavior(request: Any, context: Any) -> Any:
        if isinstance(request, _Malformed):
            await _refuse(method, request, context)
        return await inner(request, context)

    return behavior


def _stream_behavior(method: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(request: Any, context: Any) -> Any:
        if isinstance(request, _Malformed):
            await _refuse(method, request, context)
        async for response in inner(request, context):
            yield response

    return behavior
