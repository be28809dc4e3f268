"""RouterService over gRPC: validate, call the router, map domain errors to status codes.

| domain error | status |
|---|---|
| ``InvalidRequestError`` (pool syntax, key, no key and no prompt, batch size) | INVALID_ARGUMENT |
| ``UnknownPoolError`` | NOT_FOUND |
| ``NoDestinationError`` (no destinations yet, none healthy and undrained) | UNAVAILABLE |

A batch is validated and its pools checked as a whole before anything is routed, so a failing
batch leaves no in-flight correction behind; the message names the first bad index.

Requests arrive as bytes and are parsed here, not by gRPC's deserializer: malformed bytes are
INVALID_ARGUMENT with one JSON log line ("malformed request"), where a failing deserializer made
gRPC answer UNKNOWN and log a traceback per call.
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

import grpc
import structlog
from google.protobuf.message import DecodeError

from cacheroute.v1 import routing_pb2
from dataplane.core.decision_encoding import DecisionEncoder, batch_response, passthrough
from dataplane.core.route_input import InvalidRequestError, parse_batch, parse_request
from dataplane.core.router import NoDestinationError, RouteError, Router, UnknownPoolError
from dataplane.router_metrics import RouterMetrics

MAX_BATCH = 1000
SERVICE = "cacheroute.v1.RouterService"
_Context = grpc.aio.ServicerContext[Any, Any]
log = structlog.get_logger("dataplane.servicer")


class MalformedRequestError(ValueError):
    """Bytes that are not a valid request message."""


def _identity(data: bytes) -> bytes:
    return data


def _status(exc: Exception) -> grpc.StatusCode:
    if isinstance(exc, InvalidRequestError | MalformedRequestError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, UnknownPoolError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, NoDestinationError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


class RouterServicer:
    """The thin adapter between gRPC and :class:`~dataplane.core.router.Router`.

    Handlers return wire bytes (:mod:`dataplane.core.decision_encoding`); :func:`add_to_server`
    registers them with pass-through (de)serializers (requests are parsed in the handlers), so
    clients see the plain ``RouterService`` of routing.proto.
    """

    def __init__(self, router: Router, metrics: RouterMetrics, policy: str) -> None:
        self._router = router
        self._metrics = metrics
        self._encoder = DecisionEncoder(policy)

    async def Route(  # noqa: N802 - the gRPC method name
        self, data: bytes, context: _Context
    ) -> bytes:
        try:
            try:
                request = routing_pb2.RouteRequest.FromString(data)
            except DecodeError as exc:
                raise self._malformed("Route", data, exc) from None
            inp = parse_request(request)
            outcome = self._router.route(inp, time.time())
        except (InvalidRequestError, MalformedRequestError, RouteError) as exc:
            await self._abort(context, exc)
        return self._encoder.encode_outcome(outcome, inp.key_hash, inp.key, inp.request_id)

    async def RouteBatch(  # noqa: N802 - the gRPC method name
        self, data: bytes, context: _Context
    ) -> bytes:
        try:
            try:
                request = routing_pb2.RouteBatchRequest.FromString(data)
            except DecodeError as exc:
                raise self._malformed("RouteBatch", data, exc) from None
            inputs = parse_batch(request.requests, MAX_BATCH)
            outcomes = self._router.route_batch(inputs, time.time())
        except (InvalidRequestError, MalformedRequestError, RouteError) as exc:
            await self._abort(context, exc)
        encode = self._encoder.encode_outcome
        return batch_response(
            encode(outcome, inp.key_hash, inp.key, inp.request_id)
            for inp, outcome in zip(inputs, outcomes, strict=True)
        )

    @staticmethod
    def _malformed(method: str, data: bytes, exc: DecodeError) -> MalformedRequestError:
        log.info("malformed request", method=method, size=len(data), error=str(exc)[:80])
        return MalformedRequestError(f"malformed {method} request ({len(data)} bytes): {exc}")

    async def _abort(self, context: _Context, exc: Exception) -> NoReturn:
        code = _status(exc)
        self._metrics.route_error(code.name)
        await context.abort(code, str(exc))


def add_to_server(servicer: RouterServicer, server: grpc.aio.Server) -> None:
    """Register ``RouterService`` (the generated registration, with byte responses)."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Route": grpc.unary_unary_rpc_method_handler(
            servicer.Route,
            request_deserializer=_identity,
            response_serializer=passthrough,
        ),
        "RouteBatch": grpc.unary_unary_rpc_method_handler(
            servicer.RouteBatch,
            request_deserializer=_identity,
            response_serializer=passthrough,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
