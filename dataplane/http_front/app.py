"""The OpenAI-compatible HTTP front: decide in process, proxy to the engine, stream back.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not),
``POST /v1/embeddings`` and ``POST /v1/responses`` (passed through on the same routing rules; the
prompt each is keyed by: :mod:`~dataplane.openai_api.prompts`), ``GET /v1/models`` (the union
of the pool's eligible engines' models), ``GET /health``.

A completion: read the body (over ``max_body_bytes`` → 413), parse it and pick key and pool
(:mod:`~dataplane.openai_api.request_keys`, 400 naming the field), decide with the router's own
``Router.route`` on this event loop (the same policies and tables as ``Route``; unknown pool →
404, no eligible engine → 503), hold the decision's load until the response ends
(:mod:`dataplane.requests.holds`), send the body unchanged to the engine and relay its answer as it
arrives (:mod:`~dataplane.http_front.proxy`). A connect error, a 5xx or the first-byte timeout is
retried once on another node (:mod:`~dataplane.http_front.attempts`); every attempt's outcome goes
to passive health (:mod:`dataplane.health.passive_health`), which ejects a node that keeps failing.
After the first byte reached the client nothing is retried: an engine failing mid-stream ends
the stream with an error event (SSE) or a cut connection. A client that goes away cancels the
handler (``handler_cancellation``), which closes the engine connection. Every response carries
``x-cacheroute-node``, ``-reason``, ``-version`` and ``-generation`` (of the attempt that
answered; errors before a decision carry none) and every error of the front's own is
OpenAI-style JSON. Time to first byte, chunk gaps, end-to-end time and cached tokens of each
answer go to :mod:`dataplane.telemetry.served_metrics` (door ``http``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from dataplane.core.names import DEFAULT_POOL
from dataplane.core.router import NoDestinationError, RouteOutcome, Router, UnknownPoolError
from dataplane.health.passive_health import PassiveHealth
from dataplane.http_front.attempts import AttemptRelay
from dataplane.http_front.connections import ConnectionGuard, quiet_accept_errors
from dataplane.http_front.first_byte import FirstByteTimeouts
from dataplane.http_front.front_config import FrontConfig
from dataplane.http_front.metrics import FrontMetrics
from dataplane.http_front.proxy import Upstream, base_url
from dataplane.openai_api.errors import NOT_FOUND, UNAVAILABLE, FrontError
from dataplane.openai_api.request_keys import (
    POOL_HEADER,
    FrontRequest,
    KeyRules,
    front_request,
)
from dataplane.openai_api.request_keys import parse_body as parse_json_body
from dataplane.requests.holds import Holds
from dataplane.telemetry.served_metrics import ServedMetrics
from dataplane.telemetry.tracing import decision_attributes

log = structlog.get_logger("dataplane.http_front")
MODELS_TIMEOUT_S = 2.0


class HttpFront:
    """The aiohttp application and its site, on the router's event loop."""

    def __init__(
        self,
        router: Router,
        holds: Holds,
        config: FrontConfig,
        registry: CollectorRegistry,
        health: PassiveHealth | None = None,
        served: ServedMetrics | None = None,
    ) -> None:
        self.router = router
        self.served = served if served is not None else ServedMetrics(registry)
        self.passive = health if health is not None else PassiveHealth(router, registry)
        self.holds = holds
        self.config = config
        self.metrics = FrontMetrics(registry)
        self.rules = KeyRules(
            key_from_user=config.key_from_user,
            model_pools=config.model_pools,
            key_headers=config.key_headers,
            conversations=router.uses_sessions,
        )
        self.upstream = Upstream(
            connect_timeout_s=config.connect_timeout_s,
            first_byte_timeout_s=config.first_byte_timeout_s,
        )
        self.first_byte = FirstByteTimeouts(config.first_byte_floor_s, config.first_byte_timeout_s)
        self.attempts = AttemptRelay(
            router, holds, self.passive, self.metrics, self.upstream, self.first_byte, config.seed
        )
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.guard = ConnectionGuard(config.limits, registry)
        self.port = 0

    def app(self) -> web.Application:
        @web.middleware
        async def headers_arrived(request: web.Request, handler: Any) -> web.StreamResponse:
            self.guard.request_started(request.transport)
            response: web.StreamResponse = await handler(request)
            return response

        app = web.Application(
            client_max_size=self.config.max_body_bytes, middlewares=[headers_arrived]
        )
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def start(self) -> None:
        await self.upstream.start()
        host, _, port = self.config.listen.rpartition(":")
        runner = web.AppRunner(
            self.app(),
            access_log=None,
            handler_cancellation=True,  # a client that goes away cancels its engine request
            shutdown_timeout=self.config.shutdown_timeout_s,
            keepalive_timeout=self.config.limits.idle_timeout_s,
        )
        await runner.setup()
        loop = asyncio.get_running_loop()
        quiet_accept_errors(loop)
        # Our own listener (not web.TCPSite): every connection passes the guard's caps first.
        assert runner.server is not None  # set by setup()
        self._server = await loop.create_server(
            self.guard.factory(runner.server), host or "0.0.0.0", int(port), backlog=1024
        )
        self._runner = runner
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("http front serving", address=f"{host}:{self.port}")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # no new connections; open ones end with the runner's shutdown
        if self._runner is not None:
            await self._runner.shutdown()
            await self._runner.cleanup()
            self._runner = None
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        await self.upstream.close()

    # -- routes ---------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        pools = {name: len(s.view.eligible_nodes) for name, s in self.router.pools.items()}
        if self.router.not_synced:  # as gRPC health: NOT_SERVING until the first full sync
            body = {"status": "not_synced", "detail": self.router.not_synced}
            return web.json_response({**body, "eligible_engines": pools}, status=503)
        if not any(pools.values()):  # every request would be a 503: a load balancer should know
            body = {
                "status": "no_eligible_engine",
                "detail": "no pool of this router has an eligible engine (registered, healthy, "
                "not draining)",
            }
            return web.json_response({**body, "eligible_engines": pools}, status=503)
        return web.json_response({"status": "ok", "eligible_engines": pools})

    async def models(self, request: web.Request) -> web.Response:
        pool = request.headers.get(POOL_HEADER) or DEFAULT_POOL
        state = self.router.pools.get(pool)
        if state is None:
            return FrontError(
                404, f"pool {pool!r} is not known to this router", kind=NOT_FOUND, param=POOL_HEADER
            ).response()
        view = state.view
        urls = [f"{base_url(view.nodes.addresses[n])}/v1/models" for n in view.eligible_nodes]
        answers = await asyncio.gather(
            *(self.upstream.get_json(url, MODELS_TIMEOUT_S) for url in urls),
            return_exceptions=True,
        )
        seen: dict[str, object] = {}
        for answer in answers:
            if isinstance(answer, dict) and isinstance(answer.get("data"), list):
                for model in answer["data"]:
                    if isinstance(model, dict) and isinstance(model.get("id"), str):
                        seen.setdefault(model["id"], model)
        if urls and not seen:
            return FrontError(
                503,
                f"no engine of pool {pool!r} answered /v1/models",
                kind=UNAVAILABLE,
                code="no_engine",
            ).response()
        return web.json_response({"object": "list", "data": list(seen.values())})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/chat/completions", "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/completions", "completions")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/embeddings", "embeddings")

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/responses", "responses")

    # -- the proxied path ---------------------------------------------------------------------

    async def _complete(self, request: web.Request, path: str, endpoint: str) -> web.StreamResponse:
        # The request metric's label: /v1/chat/completions -> chat_completions, /v1/embeddings ->
        # embeddings (the last segment alone would call chat requests "completions").
        route = path.removeprefix("/v1/").replace("/", "_")
        started = time.perf_counter()
        try:
            raw = await self._read(request)
            parsed = front_request(
                parse_json_body(raw),
                request.headers,
                endpoint=endpoint,
                rules=self.rules,
                request_id=request.headers.get("x-request-id") or f"http-{next(self._ids)}",
            )
            now = time.time()
            outcome = self._decide(parsed, now)
        except FrontError as exc:
            self.metrics.answered(route, exc.status)
            return exc.response()
        self.served.key_source("http", parsed.key_source)
        timer = self.served.timer(
            "http",
            parsed.route.pool,
            parsed.model,
            started,
            request.headers,
            decision_attributes(outcome, parsed.key_source),
        )
        held = [self.holds.take(parsed.route, outcome, now)]
        try:
            response = await self.attempts.proxy(request, raw, path, parsed, outcome, held, timer)
            self.metrics.answered(route, response.status)
            timer.finish(completed=response.status < 400)
            return response
        except (asyncio.CancelledError, ConnectionError):
            self.metrics.client_gone.inc()
            raise
        finally:
            timer.finish(completed=False)  # no-op after a completed answer
            for hold in held:
                self.holds.release(hold)

    async def _read(self, request: web.Request) -> bytes:
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit)
        try:
            async with asyncio.timeout(self.config.limits.body_timeout_s):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(None, limit) from None
        except TimeoutError:
            raise FrontError(
                408,
                f"the request body did not arrive within {self.config.limits.body_timeout_s:g} s",
                code="body_timeout",
            ) from None

    def _decide(self, parsed: FrontRequest, now: float) -> RouteOutcome:
        try:
            return self.router.route(parsed.route, now)
        except UnknownPoolError as exc:
            raise FrontError(
                404, str(exc), kind=NOT_FOUND, param=POOL_HEADER, code="pool_not_found"
            ) from None
        except NoDestinationError as exc:
            raise FrontError(503, str(exc), kind=UNAVAILABLE, code="no_eligible_engine") from None


def _too_large(size: int | None, limit: int) -> FrontError:
    what = f"{size} bytes" if size is not None else "larger than the limit"
    return FrontError(
        413, f"request body is {what}; the limit is {limit} bytes", code="body_too_large"
    )
