"""The HTTP front of one simulated engine (aiohttp): OpenAI-compatible routes, health, metrics.

* ``POST /v1/completions``, ``POST /v1/chat/completions``: a completion. With ``"stream": true``,
  server-sent events: the first chunk when the simulated prefill completes, then the tokens as
  decode steps complete, then (with ``stream_options.include_usage``) a usage chunk, then
  ``data: [DONE]``.
* ``GET /v1/models``: the served model. ``GET /health``: 200 while the engine runs.
* ``GET /metrics``: Prometheus text, vLLM v1 names (:mod:`simengine.vllm_metrics`).
* ``POST /reset_prefix_cache`` (admin, vLLM's endpoint of the same name): drop every cached
  block; 409 while requests are in flight.

``stream_interval_s`` coalesces streamed tokens: 0 sends one chunk per decode step (vLLM's
default), a positive value at most one chunk per request per interval of wall time (the local
cluster uses it to keep a 2-core machine's CPU for the engines). The first token is never
delayed. A client that disconnects mid-stream does not abort its request: the simulated engine
keeps working on it, like an engine without abort support.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

from simengine.protocol import ApiError, ParsedRequest, parse_request
from simengine.realtime_engine import SimEngine
from simengine.responses import chunk_body, completion_body, token_text, usage, usage_chunk
from simengine.tickets import RequestTooLargeError, Ticket
from simengine.vllm_metrics import EngineMetrics

_CLIENT_GONE = (ConnectionError,)  # includes aiohttp's ClientConnectionResetError
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _json(data: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


class EngineApi:
    """Routes of one engine; :meth:`app` builds the aiohttp application."""

    def __init__(
        self,
        engine: SimEngine,
        *,
        model: str,
        stream_interval_s: float = 0.0,
        max_model_len: int | None = None,
    ) -> None:
        self.engine = engine
        self.model = model
        self.stream_interval_s = stream_interval_s
        self.metrics = EngineMetrics(engine, model)
        self.max_model_len = max_model_len or engine.profile.kv_blocks * engine.profile.block_tokens
        self.created = int(time.time())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_get("/admin/slowdown", self.slowdown)
        app.router.add_post("/admin/slowdown", self.slowdown)
        return app

    # -- simple routes --------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "cacheroute-simengine",
                        "root": self.model,
                        "max_model_len": self.max_model_len,
                    }
                ],
            }
        )

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE}
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        if self.engine.reset_prefix_cache():
            return _json({"reset": True})
        busy = self.engine.running + self.engine.waiting
        return _json(
            ApiError(
                409,
                f"cannot reset the prefix cache while {busy} requests are in flight",
                kind="conflict",
            ).body(),
            409,
        )

    async def slowdown(self, request: web.Request) -> web.Response:
        """GET: the step-time multiplier; POST ``{"factor": F}``: set it (fault injection)."""
        if request.method == "POST":
            try:
                body = await request.json()
                factor = float(body["factor"])
                self.engine.set_slowdown(factor)
            except (ValueError, TypeError, KeyError) as exc:
                message = f'body must be {{"factor": F}} with 0 < F <= 1000: {exc}'
                return _json(ApiError(400, message, param="factor").body(), 400)
        return _json({"factor": self.engine.slowdown})

    # -- completions ----------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def _complete(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            try:
                body = await request.json(loads=json.loads)
            except ValueError:
                raise ApiError(400, "the request body is not valid JSON") from None
            parsed = parse_request(body, chat=chat, served_model=self.model)
            try:
                ticket = self.engine.submit(parsed.engine)
            except RequestTooLargeError as exc:
                raise ApiError(400, str(exc), param="max_tokens") from None
        except ApiError as exc:
            return _json(exc.body(), exc.status)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if parsed.stream:
            return await self._stream(request, parsed, ticket, rid, created)
        await ticket.done.wait()
        if ticket.error is not None:
            return _json(ApiError(503, ticket.error, kind="ServiceUnavailable").body(), 503)
        out = ticket.output_tokens
        text = token_text(0, out)
        body_out = completion_body(
            parsed, rid, created, text, usage(ticket.prompt_tokens, out, ticket.cached_tokens)
        )
        return _json(body_out)

    async def _stream(
        self,
        request: web.Request,
        parsed: ParsedRequest,
        ticket: Ticket,
        rid: str,
        created: int,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            await ticket.first_token.wait()
            if ticket.error is None:
                await self._send_tokens(response, parsed, ticket, rid, created)
                if parsed.include_usage:
                    counts = usage(ticket.prompt_tokens, ticket.output_tokens, ticket.cached_tokens)
                    await response.write(_sse(usage_chunk(parsed, rid, created, counts)))
            else:
                error = ApiError(503, ticket.error, kind="ServiceUnavailable")
                await response.write(_sse(error.body()))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except _CLIENT_GONE:
            pass  # the client went away; the engine finishes the request anyway
        return response

    async def _send_tokens(
        self,
        response: web.StreamResponse,
        parsed: ParsedRequest,
        ticket: Ticket,
        rid: str,
        created: int,
    ) -> None:
        engine = self.engine
        interval = self.stream_interval_s
        sent = 0
        total = ticket.output_tokens
        while sent < total:
            produced = engine.tokens_out(ticket)
            if produced > sent:
                chunk = chunk_body(
                    parsed,
                    rid,
                    created,
                    token_text(sent, produced),
                    first=sent == 0,
                    finished=produced >= total,
                )
                await response.write(_sse(chunk))
                sent = produced
                if sent >= total:
                    return
            if ticket.error is not None:
                return
            if interval > 0:
                done_wait = asyncio.ensure_future(ticket.done.wait())
                try:
                    await asyncio.wait({done_wait}, timeout=interval)
                finally:
                    done_wait.cancel()
            else:
                await engine.step_event().wait()
