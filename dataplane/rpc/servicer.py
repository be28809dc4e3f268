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

``hold_until_release`` (with a ``request_id``) holds the decision's load until ``Release`` names the
id (:mod:`dataplane.requests.holds`); without an id it is INVALID_ARGUMENT, checked before routing.
With ``--auth-file`` or ``--planning-rate-limit`` (:mod:`dataplane.requests.planning_gate`) some
calls are routed but not counted for planning. A ``Release`` that carries an ``outcome`` reports it
to passive health (:mod:`dataplane.health.passive_health`), but only when it ends an open hold, and
only under :mod:`dataplane.health.health_feedback`'s rule (authenticated callers with an auth file;
at most a bounded share of a pool ejected through one caller's reports).
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

import grpc
import structlog
from google.protobuf.message import DecodeError
from prometheus_client import CollectorRegistry

from cacheroute.v1 import routing_pb2
from dataplane.core.decision_encoding import DecisionEncoder, batch_response
from dataplane.core.route_input import InvalidRequestError, parse_batch, parse_request
from dataplane.core.router import NoDestinationError, RouteError, Router, UnknownPoolError
from dataplane.health.health_feedback import HealthFeedback
from dataplane.health.passive_health import PassiveHealth
from dataplane.requests.callers import CallerNames
from dataplane.requests.holds import Holds
from dataplane.requests.planning_gate import PlanningGate
from dataplane.telemetry.router_metrics import RouterMetrics

MAX_BATCH = 1000
SERVICE = "cacheroute.v1.RouterService"
_Context = grpc.aio.ServicerContext[Any, Any]
log = structlog.get_logger("dataplane.rpc.servicer")


class MalformedRequestError(ValueError):
    """Bytes that are not a valid request message."""


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
    registers them without (de)serializers (requests are parsed in the handlers), so
    clients see the plain ``RouterService`` of routing.proto.
    """

    def __init__(
        self,
        router: Router,
        metrics: RouterMetrics,
        policy: str,
        holds: Holds | None = None,
        health: PassiveHealth | None = None,
        planning: PlanningGate | None = None,
        feedback: HealthFeedback | None = None,
    ) -> None:
        self._router = router
        if feedback is None and health is not None:  # peers named by address, default share
            feedback = HealthFeedback(router, health, CallerNames(None).name, CollectorRegistry())
        self._feedback = feedback  # None: Release outcomes are not applied
        self._planning = planning  # None: every request counts for planning
        self._metrics = metrics
        self._encoder = DecisionEncoder(policy)
        self._holds = holds if holds is not None else Holds(router)

    async def Route(  # noqa: N802 - the gRPC method name
        self, data: bytes, context: _Context
    ) -> bytes:
        try:
            try:
                request = routing_pb2.RouteRequest.FromString(data)
            except DecodeError as exc:
                raise self._malformed("Route", data, exc) from None
            inp = parse_request(request, wire_size=len(data))
            hold = request.hold_until_release
            if hold:
                _check_holdable(request)
            now = time.time()
            planning = self._planning
            counted = planning is None or planning.counted(context, 1) == 1
            outcome = self._router.route(inp, now, counted)
        except (InvalidRequestError, MalformedRequestError, RouteError) as exc:
            await self._abort(context, exc)
        if hold:
            holds = self._holds
            holds.name(inp.request_id, holds.take(inp, outcome, now), now)
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
            held = [i for i, inp in enumerate(inputs) if inp.message.hold_until_release]
            for index in held:
                try:
                    _check_holdable(inputs[index].message)
                except InvalidRequestError as exc:
                    raise InvalidRequestError(f"requests[{index}]: {exc}") from None
            now = time.time()
            planning = self._planning
            counted = None if planning is None else planning.counted(context, len(inputs))
            outcomes = self._router.route_batch(inputs, now, counted)
            holds = self._holds
            for index in held:
                inp = inputs[index]
                holds.name(inp.request_id, holds.take(inp, outcomes[index], now), now)
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

    async def Release(  # noqa: N802 - the gRPC method name
        self, request: routing_pb2.ReleaseRequest, context: _Context
    ) -> routing_pb2.ReleaseResponse:
        if not request.request_id:
            await self._abort(context, InvalidRequestError("request_id is empty"))
        hold = self._holds.release_named(request.request_id)
        outcome = request.outcome
        if hold is not None and outcome and self._feedback is not None:  # only its own hold
            cause = (
                None
                if outcome == routing_pb2.RELEASE_OUTCOME_SUCCESS
                else _RELEASE_CAUSES.get(outcome, "unknown")
            )
            self._feedback.report(context, hold.pool, hold.node_id, cause)
        return routing_pb2.ReleaseResponse(released=hold is not None)

    async def _abort(self, context: _Context, exc: Exception) -> NoReturn:
        code = _status(exc)
        self._metrics.route_error(code.name)
        await context.abort(code, str(exc))


_RELEASE_CAUSES = {  # the HTTP front's cause labels, so both kinds of report read alike
    routing_pb2.RELEASE_OUTCOME_CONNECT_FAILED: "connect",
    routing_pb2.RELEASE_OUTCOME_TIMEOUT: "timeout",
    routing_pb2.RELEASE_OUTCOME_SERVER_ERROR: "5xx",
    routing_pb2.RELEASE_OUTCOME_BROKEN: "mid_stream",
}


def _check_holdable(request: routing_pb2.RouteRequest) -> None:
    if not request.request_id:
        raise InvalidRequestError("hold_until_release needs a request_id to Release it by")


def add_to_server(servicer: RouterServicer, server: grpc.aio.Server) -> None:
    """Register ``RouterService`` (the generated registration, with byte responses)."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        # No (de)serializer: gRPC hands the handler the request bytes and sends the bytes it
        # returns, without a Python call either way.
        "Route": grpc.unary_unary_rpc_method_handler(servicer.Route),
        "RouteBatch": grpc.unary_unary_rpc_method_handler(servicer.RouteBatch),
        "Release": grpc.unary_unary_rpc_method_handler(
            servicer.Release,
            request_deserializer=routing_pb2.ReleaseRequest.FromString,
            response_serializer=routing_pb2.ReleaseResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
