"""Every RPC handler of a server, bounded and checked before its request is parsed or even read.

:class:`GrpcServer` registers every service through :class:`GuardedRegistry`, which wraps each
method handler once (no per-call interceptor, so ``Route`` pays nothing):

* **Size before parsing.** gRPC's core enforces one receive limit per server
  (``grpc.max_receive_message_length``); per-method limits can only be checked on the received
  bytes, which this does before any parser sees them (RESOURCE_EXHAUSTED naming the limit).
* **Identity before the body.** With a ``check`` (the control plane's authentication), a
  unary-request method is served as a request-streaming one: ``check`` runs on the call's
  metadata and peer first, and only then is the message read. A refused caller's body is never
  read past the HTTP/2 flow-control window, let alone parsed. (gRPC offers no hook that runs
  before the core buffers a *read* message, so an authenticated caller can still make the server
  hold one message of up to the server-wide limit.)
* **Garbage is INVALID_ARGUMENT.** A deserializer that raises (bytes that are not the message)
  becomes INVALID_ARGUMENT with one log line, where gRPC would answer INTERNAL or UNKNOWN with a
  traceback; health ``Watch`` and reflection are covered like every other method.

Handlers registered without a deserializer (the router's ``Route``: it parses the bytes itself)
and without a check are left exactly as they are.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc
import structlog

log = structlog.get_logger("servekit.rpc_guard")

if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]
else:
    Handler = grpc.RpcMethodHandler
    Context = grpc.aio.ServicerContext

# (method, context) → the caller's name; aborts the call to refuse it. None: the method is open.
Check = Callable[[str, Context], Awaitable[str]]
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("cacheroute_caller", default="")


class RpcGuard:
    """What to enforce: ``limit_of(method)`` bytes, and ``check_of(method)`` (None: open)."""

    def __init__(
        self,
        limit_of: Callable[[str], int],
        check_of: Callable[[str], Check | None] = lambda _method: None,
    ) -> None:
        self.limit_of = limit_of
        self.check_of = check_of

    def wrap(self, method: str, handler: Handler) -> Handler:
        check = self.check_of(method)
        if handler.request_deserializer is None and check is None:
            return handler  # raw bytes, parsed (and refused) by the handler itself
        decode = _safe(handler.request_deserializer, self.limit_of(method))
        serialize = handler.response_serializer
        if handler.unary_unary is not None:
            if check is None:
                return grpc.unary_unary_rpc_method_handler(
                    _unary(method, handler.unary_unary), decode, serialize
                )
            return grpc.stream_unary_rpc_method_handler(
                _checked_unary(method, handler.unary_unary, check), decode, serialize
            )
        if handler.unary_stream is not None:
            if check is None:
                return grpc.unary_stream_rpc_method_handler(
                    _unary_stream(method, handler.unary_stream), decode, serialize
                )
            return grpc.stream_stream_rpc_method_handler(
                _checked_unary_stream(method, handler.unary_stream, check), decode, serialize
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _stream_unary(method, handler.stream_unary, check), decode, serialize
            )
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            _stream_stream(method, handler.stream_stream, check), decode, serialize
        )


class _Refused:
    """What the deserializer hands on instead of a message: the handler aborts with it."""

    __slots__ = ("code", "detail", "size")

    def __init__(self, code: grpc.StatusCode, size: int, detail: str) -> None:
        self.code = code
        self.size = size
        self.detail = detail


def _safe(deserializer: Callable[[bytes], Any] | None, limit: int) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        if len(data) > limit:
            return _Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED, len(data), f"the limit is {limit} bytes"
            )
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or anything a parser raises on garbage
            return _Refused(grpc.StatusCode.INVALID_ARGUMENT, len(data), str(exc)[:80])

    return decode


async def _refuse(method: str, request: _Refused, context: Context) -> None:
    name = method.rsplit("/", 1)[-1]
    log.info(
        "request refused before parsing",
        method=method, code=request.code.name, size=request.size, error=request.detail,
    )  # fmt: skip
    what = "too large" if request.code is grpc.StatusCode.RESOURCE_EXHAUSTED else "malformed"
    await context.abort(
        request.code, f"{what} {name} request ({request.size} bytes; {request.detail})"
    )


async def _checked(method: str, request: Any, context: Context) -> Any:
    if isinstance(request, _Refused):
        await _refuse(method, request, context)
    return request


async def _first(method: str, requests: AsyncIterator[Any], context: Context) -> Any:
    """The one message of a unary request, read only now (after the check)."""
    async for request in requests:
        return await _checked(method, request, context)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")


async def _drain(result: Any) -> AsyncIterator[Any]:
    """A streaming handler's answers: an async generator's items, or nothing for a coroutine
    that writes with ``context.write`` (the health servicer's ``Watch``)."""
    if inspect.isasyncgen(result):
        async for item in result:
            yield item
    elif inspect.isawaitable(result):
        await result


async def _filtered(method: str, requests: AsyncIterator[Any], context: Context) -> Any:
    async for request in requests:
        yield await _checked(method, request, context)


async def _identify(check: Check | None, method: str, context: Context) -> None:
    if check is not None:
        CALLER.set(await check(method, context))


async def _answer(method: str, inner: Callable[..., Any], request: Any, context: Context) -> Any:
    try:
        return await inner(request, context)
    except NotImplementedError:  # a generated base method (health List on older servicers)
        log.info("method not implemented", method=method)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")


def _unary(method: str, inner: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def behavior(request: Any, context: Context) -> Any:
        return await _answer(method, inner, await _checked(method, request, context), context)

    return behavior


def _checked_unary(method: str, inner: Callable[..., Any], check: Check) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: Context) -> Any:
        await _identify(check, method, context)
        return await _answer(method, inner, await _first(method, requests, context), context)

    return behavior


def _unary_stream(method: str, inner: Callable[..., Any]) -> Callable[..., Any]:
    async def behavior(request: Any, context: Context) -> AsyncIterator[Any]:
        async for item in _drain(inner(await _checked(method, request, context), context)):
            yield item

    return behavior


def _checked_unary_stream(
    method: str, inner: Callable[..., Any], check: Check
) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        await _identify(check, method, context)
        request = await _first(method, requests, context)
        async for item in _drain(inner(request, context)):
            yield item

    return behavior


def _stream_unary(
    method: str, inner: Callable[..., Any], check: Check | None
) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: Context) -> Any:
        await _identify(check, method, context)
        return await inner(_filtered(method, requests, context), context)

    return behavior


def _stream_stream(
    method: str, inner: Callable[..., Any], check: Check | None
) -> Callable[..., Any]:
    async def behavior(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        await _identify(check, method, context)
        async for item in _drain(inner(_filtered(method, requests, context), context)):
            yield item

    return behavior


class _GuardedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose method handlers come out wrapped (once per method)."""

    def __init__(self, inner: grpc.GenericRpcHandler, guard: RpcGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._wrapped: dict[str, Handler | None] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        method: str = handler_call_details.method
        if method not in self._wrapped:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # unknown methods are not cached (the cache stays bounded)
            self._wrapped[method] = self._guard.wrap(method, handler)
        return self._wrapped[method]


class GuardedRegistry:
    """Stands in for the server in ``add_*Servicer_to_server``: registers wrapped handlers."""

    def __init__(self, server: grpc.aio.Server, guard: RpcGuard) -> None:
        self._server = server
        self._guard = guard

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_GuardedGeneric(h, self._guard) for h in handlers)
        )

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Handler]) -> None:
        wrapped = {name: self._guard.wrap(f"/{service}/{name}", h) for name, h in handlers.items()}
        self._server.add_registered_method_handlers(service, wrapped)
