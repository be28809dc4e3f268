"""One ext_proc stream (one HTTP request through the gateway) as a small state machine.

Request side (``request_body_mode: FULL_DUPLEX_STREAMED``; the headers-only and buffered modes
are :mod:`dataplane.extproc.modes`):

* request headers with a key header (:func:`~dataplane.openai_api.request_keys.header_request`):
  decide at once and answer the headers with the pick; later body chunks are echoed as they come;
* a request without a body (``GET /v1/models``): decide by power-of-two choices (not counted for
  planning: there is no key);
* otherwise hold the headers' answer, gather the body (over ``max_body_bytes``: 413, nothing
  forwarded; over every stream's shared :mod:`~dataplane.extproc.body_budget`: 503; not done
  within ``body_timeout_s``: 408), parse it with the HTTP front's own rules (:func:`~dataplane.
  openai_api.request_keys.front_request`), decide, answer the headers and echo the body.

A request that cannot be routed is answered by the gateway itself (``ImmediateResponse``): 400
naming the field, 404 (unknown pool), 408, 413, 503 (nothing eligible, or the budget is full).

Response side: the response headers tell which endpoint served and the status. Entries of the
pick before the served one failed (the gateway retried down the list) and the hold moves to the
node that served; a 5xx counts against it, anything else for it. Every outcome goes through
:class:`~dataplane.health.health_feedback.HealthFeedback` under the stream's caller name (the
rule and per-caller share of ``Release``). A ``:status`` that is not a number in 100-599, and
request headers after the decision, are ignored and counted. The hold ends with the response's
end of stream or the stream's end, whichever comes first.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from cacheroute.v1 import routing_pb2
from dataplane.core.route_input import InvalidRequestError, parse_request
from dataplane.core.router import NoDestinationError, UnknownPoolError
from dataplane.extproc import wire
from dataplane.extproc.context import PickerContext
from dataplane.extproc.fallback import settle
from dataplane.extproc.modes import BODY_CONTINUE, HEADERS_CONTINUE, BodyMode, body_mode, body_pick
from dataplane.extproc.pick import Pick, pick
from dataplane.openai_api.errors import NOT_FOUND, UNAVAILABLE, FrontError, bad_request
from dataplane.openai_api.prompts import endpoint_of
from dataplane.openai_api.request_keys import (
    POOL_HEADER,
    FrontRequest,
    front_request,
    header_request,
    parse_body,
)
from dataplane.requests.holds import Hold
from dataplane.telemetry.served_metrics import AnswerTimer
from dataplane.telemetry.tracing import decision_attributes

_IDS = itertools.count(1)


class PickerStream:
    """The state of one stream; :meth:`on_message` answers each message, :meth:`close` ends it."""

    def __init__(self, context: PickerContext, caller: str = "") -> None:
        self.ctx = context
        self.caller = caller  # whose outcomes these are ("": they do not count)
        self.done = False
        self.waiting_since: float | None = None  # monotonic: the body is awaited since then
        self._taken = 0  # bytes of the shared body budget this stream holds
        self._headers: dict[str, str] = {}
        self._subset: frozenset[str] | None = None
        self._body = bytearray()
        self._decided = False
        self._pick: Pick | None = None
        self._request: FrontRequest | None = None
        self._hold: Hold | None = None
        self._served = -1  # index into the pick's nodes of the node that answered
        self._answered = False  # response headers with a status below 400 came
        self._timer: AnswerTimer | None = None
        self._started = 0.0
        self._mode = BodyMode.STREAMED  # what Envoy announced (dataplane/extproc/modes.py)

    def on_message(self, message: Any) -> list[Any]:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            return self._request_headers(message)
        if kind == "request_body":
            return self._request_body(message.request_body)
        if kind == "request_trailers":
            return self._request_trailers()
        if kind == "response_headers":
            return self._response_headers(message)
        if kind == "response_body":
            return self._response_body(message.response_body)
        if kind == "response_trailers":
            self._finish(completed=True)
            return [wire.trailers_done(response=True)]
        return []  # a message kind this picker did not ask for

    def close(self) -> None:
        """The stream ended: what the request held (its hold, its buffered bytes) is released.

        After response headers below 400 the request counts as answered: with the recipe's
        processing mode the stream's end is the only sign of the answer's end (a client gone
        after the headers looks the same).
        """
        self._finish(completed=self._answered)
        self._give_back()

    def timed_out(self) -> Any:
        """The answer when the body did not end within ``body_timeout_s`` (408)."""
        limit = self.ctx.config.body_timeout_s
        return self._error(
            FrontError(408, f"request body not complete within {limit:g} s", code="body_timeout")
        )

    def _give_back(self) -> None:
        self.waiting_since = None
        if self._taken:
            self.ctx.budget.give(self._taken)
            self._taken = 0

    def _request_headers(self, message: Any) -> list[Any]:
        if self._decided or self._headers:
            self.ctx.metrics.ignored("request_headers")  # a second request: one hold per stream
            return [wire.request_headers_done()]
        self._started = time.perf_counter()
        headers = wire.header_map(message.request_headers.headers)
        if POOL_HEADER not in headers and self.ctx.config.pool:
            headers[POOL_HEADER] = self.ctx.config.pool
        self._headers = headers
        self._subset = wire.subset_hint(message)
        self._mode = body_mode(message)
        try:
            found = header_request(headers, self.ctx.rules, self._request_id())
            if found is not None:
                return [self._decide(found, "headers")]
            if message.request_headers.end_of_stream or self._mode is BodyMode.NONE:
                return [self._decide(self._bodiless(), "bodiless")]
        except FrontError as exc:
            return [self._error(exc)]
        self.waiting_since = time.monotonic()
        if self._mode is BodyMode.BUFFERED:
            return [HEADERS_CONTINUE]  # the pick rides on the body's answer
        return []  # the key is in the body: answer the headers once it is all here

    def _request_body(self, body: Any) -> list[Any]:
        chunk = bytes(body.body)
        if self._decided:
            if self._mode is BodyMode.BUFFERED:
                return [BODY_CONTINUE]
            return wire.body_echo(chunk, body.end_of_stream)
        limit = self.ctx.config.max_body_bytes
        if len(self._body) + len(chunk) > limit:
            message = f"request body is larger than the limit of {limit} bytes"
            return [self._error(FrontError(413, message, code="body_too_large"))]
        if not self.ctx.budget.take(len(chunk)):
            message = "the router holds as many request bodies as it may; retry"
            return [self._error(FrontError(503, message, kind=UNAVAILABLE, code="picker_busy"))]
        self._taken += len(chunk)
        self._body += chunk
        if not body.end_of_stream:
            return []
        return self._decide_on_body(end_of_stream=True)

    def _request_trailers(self) -> list[Any]:
        if self._decided:
            return [wire.trailers_done()]
        answers = self._decide_on_body(end_of_stream=False)
        return answers if self.done else [*answers, wire.trailers_done()]

    def _decide_on_body(self, *, end_of_stream: bool) -> list[Any]:
        raw = bytes(self._body)
        self._body = bytearray()
        self._give_back()
        path = self._headers.get(":path", "")
        try:
            found = front_request(
                parse_body(raw),
                self._headers,
                endpoint=endpoint_of(path) or "completions",
                rules=self.ctx.rules,
                request_id=self._request_id(),
            )
            answer = self._decide(found, "body")
        except FrontError as exc:
            return [self._error(exc)]
        if self._mode is BodyMode.BUFFERED and self._pick is not None:
            return [body_pick(self._pick.endpoints)]  # the body goes on as it is: no echo
        return [answer, *wire.body_echo(raw, end_of_stream)]

    def _bodiless(self) -> FrontRequest:
        pool = self._headers.get(POOL_HEADER, "")
        key = f"request/{next(_IDS)}"  # no key to keep: spread by power-of-two choices
        message = routing_pb2.RouteRequest(pool=pool, key=key, request_id=self._request_id())
        try:
            return FrontRequest(parse_request(message), False, "", "none")
        except InvalidRequestError as exc:
            raise bad_request(str(exc), param=POOL_HEADER) from None

    def _request_id(self) -> str:
        return self._headers.get("x-request-id", "")[:256] or f"extproc-{next(_IDS)}"

    def _decide(self, request: FrontRequest, stage: str) -> Any:
        ctx = self.ctx
        now = time.time()
        try:
            chosen = pick(
                ctx.router,
                request.route,
                now,
                subset=self._subset,
                fallbacks=ctx.config.fallbacks,
                rng=ctx.rng,
                counted=stage != "bodiless",
            )
        except UnknownPoolError as exc:
            raise FrontError(
                404, str(exc), kind=NOT_FOUND, param=POOL_HEADER, code="pool_not_found"
            ) from None
        except NoDestinationError as exc:
            raise FrontError(503, str(exc), kind=UNAVAILABLE, code="no_eligible_engine") from None
        self._decided = True
        self._pick = chosen
        self._request = request
        self._served = 0
        self._hold = ctx.holds.take_node(request.route.pool, chosen.view, chosen.nodes[0], now)
        ctx.metrics.decided(stage)
        ctx.served.key_source("extproc", request.key_source)
        model = request.model or self._headers.get("x-model", "")
        self._timer = ctx.served.timer(
            "extproc",
            request.route.pool,
            model,
            self._started,
            self._headers,
            decision_attributes(chosen.outcome, request.key_source),
        )
        return wire.pick_response(chosen.endpoints)

    def _error(self, exc: FrontError) -> Any:
        self.done = True
        self._body = bytearray()
        self._give_back()
        self.ctx.metrics.immediate(exc.status)
        return wire.immediate(
            exc.status, exc.message, kind=exc.kind, code=exc.code or "error", param=exc.param
        )

    def _response_headers(self, message: Any) -> list[Any]:
        chosen = self._pick
        if chosen is None or self._request is None:
            return [wire.response_headers_done()]
        status, served = wire.status_and_served(message)
        pool = self._request.route.pool
        if status == wire.BAD_STATUS:
            self.ctx.metrics.ignored(":status")  # no outcome: it says nothing about the engine
        else:
            self._settle(chosen, pool, served)
            failed = "5xx" if status >= 500 else None
            self.ctx.feedback.report_as(self.caller, pool, self._node_served(chosen), failed)
        node_id = self._node_served(chosen)
        outcome = chosen.outcome
        extra: tuple[str, ...] = (
            "x-cacheroute-node", node_id,
            "x-cacheroute-reason", str(outcome.reason),
            "x-cacheroute-version", outcome.version,
            "x-cacheroute-generation", str(outcome.generation),
        )  # fmt: skip
        if self._served > 0:
            extra = (*extra, "x-cacheroute-retried-from", outcome.node_id)
        self._answered = 0 < status < 400
        if status >= 400 and self._timer is not None:
            self._timer.finish(completed=False)  # errors are not latency samples
        if message.response_headers.end_of_stream:
            self._finish(completed=True)
        return [wire.response_headers_done(*extra)]

    def _node_served(self, chosen: Pick) -> str:
        return chosen.view.nodes.ids[chosen.nodes[self._served]]

    def _settle(self, chosen: Pick, pool: str, served: str) -> None:
        """Earlier entries than the one that served failed; the hold moves to the served one."""
        moved = settle(self.ctx, self.caller, chosen, pool, served, self._hold)
        if moved is not None:
            self._served, self._hold = moved

    def _response_body(self, body: Any) -> list[Any]:
        chunk = bytes(body.body)
        if self._timer is not None and not self._timer.finished:
            self._timer.chunk(chunk)
        answers = wire.body_echo(chunk, body.end_of_stream, response=True)
        if body.end_of_stream:
            self._finish(completed=True)
        return answers

    def _finish(self, *, completed: bool) -> None:
        if self._timer is not None:
            self._timer.finish(completed=completed)
        if self._hold is not None:
            self.ctx.holds.release(self._hold)
            self._hold = None
