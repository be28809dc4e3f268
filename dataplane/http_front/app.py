"""The OpenAI-compatible HTTP front: decide in process, proxy to the engine, stream back.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions`` (streaming or not),
``GET /v1/models`` (the union of the pool's eligible engines' models), ``GET /health``.

A completion: read the body (over ``max_body_bytes`` → 413), parse it and pick key and pool
(:mod:`~dataplane.http_front.request_keys`, 400 naming the field), decide with the router's own
``Router.route`` on this event loop (the same policies and tables as ``Route``; unknown pool →
404, no eligible engine → 503), hold the decision's load until the response ends
(:mod:`dataplane.holds`), send the body unchanged to the engine and relay its answer as it arrives
(:mod:`~dataplane.http_front.proxy`). A connect error, a 5xx or the first-byte timeout is retried
once on another node (:mod:`~dataplane.http_front.choose`); every attempt's outcome goes to
passive health (:mod:`dataplane.passive_health`), which ejects a node that keeps failing.
After the first byte reached the client nothing is retried: an engine failing mid-stream ends
the stream with an error event (SSE) or a cut connection. A client that goes away cancels the
handler (``handler_cancellation``), which closes the engine connection. Every response carries
``x-cacheroute-node``, ``-reason``, ``-version`` and ``-generation`` (of the attempt that
answered; errors before a decision carry none) and every error of the front's own is
OpenAI-style JSON.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from dataplane.core.names import DEFAULT_POOL
from dataplane.core.router import NoDestinationError, RouteOutcome, Router, UnknownPoolError
from dataplane.holds import Hold, Holds
from dataplane.http_front.choose import alternate
from dataplane.http_front.errors import NOT_FOUND, SERVER_ERROR, UNAVAILABLE, FrontError
from dataplane.http_front.metrics import FrontMetrics
from dataplane.http_front.proxy import AttemptFailedError, Upstream, base_url, relay
from dataplane.http_front.request_keys import (
    POOL_HEADER,
    SESSION_HEADER,
    FrontRequest,
    KeyRules,
    front_request,
)
from dataplane.http_front.request_keys import parse_body as parse_json_body
from dataplane.passive_health import PassiveHealth

log = structlog.get_logger("dataplane.http_front")
MODELS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class FrontConfig:
    """Options of the front (``python -m dataplane --help``: the ``--http-*`` flags)."""

    listen: str = "127.0.0.1:0"
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 2.0
    first_byte_timeout_s: float = 120.0
    key_from_user: bool = False
    model_pools: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    shutdown_timeout_s: float = 5.0  # open responses get this long on stop, then are cut


def decision_headers(outcome: RouteOutcome) -> dict[str, str]:
    return {
        "x-cacheroute-node": outcome.node_id,
        "x-cacheroute-reason": str(outcome.reason),
        "x-cacheroute-version": outcome.version,
        "x-cacheroute-generation": str(outcome.generation),
        SESSION_HEADER: outcome.session_token,
    }


class HttpFront:
    """The aiohttp application and its site, on the router's event loop."""

    def __init__(
        self,
        router: Router,
        holds: Holds,
        config: FrontConfig,
        registry: CollectorRegistry,
        health: PassiveHealth | None = None,
    ) -> None:
        self.router = router
        self.passive = health if health is not None else PassiveHealth(router, registry)
        self.holds = holds
        self.config = config
        self.metrics = FrontMetrics(registry)
        self.rules = KeyRules(key_from_user=config.key_from_user, model_pools=config.model_pools)
        self.upstream = Upstream(
            connect_timeout_s=config.connect_timeout_s,
            first_byte_timeout_s=config.first_byte_timeout_s,
        )
        self._rng = random.Random(config.seed)
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/completions", self.completions)
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
        )
        await runner.setup()
        site = web.TCPSite(runner, host or "0.0.0.0", int(port))
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("http front serving", address=f"{host}:{self.port}")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.shutdown()
            await self._runner.cleanup()
            self._runner = None
        await self.upstream.close()

    # -- routes ---------------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        pools = {name: len(s.view.eligible_nodes) for name, s in self.router.pools.items()}
        if self.router.not_synced:  # as gRPC health: NOT_SERVING until the first full sync
            body = {"status": "not_synced", "detail": self.router.not_synced}
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
        return await self._complete(request, "/v1/chat/completions", chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/completions", chat=False)

    # -- the proxied path ---------------------------------------------------------------------

    async def _complete(self, request: web.Request, path: str, *, chat: bool) -> web.StreamResponse:
        route = path.rsplit("/", 1)[1]
        try:
            raw = await self._read(request)
            parsed = front_request(
                parse_json_body(raw),
                request.headers,
                chat=chat,
                rules=self.rules,
                request_id=request.headers.get("x-request-id") or f"http-{next(self._ids)}",
            )
            now = time.time()
            outcome = self._decide(parsed, now)
        except FrontError as exc:
            self.metrics.answered(route, exc.status)
            return exc.response()
        held = [self.holds.take(parsed.route, outcome, now)]
        try:
            response = await self._proxy(request, raw, path, parsed, outcome, held)
            self.metrics.answered(route, response.status)
            return response
        except (asyncio.CancelledError, ConnectionError):
            self.metrics.client_gone.inc()
            raise
        finally:
            for hold in held:
                self.holds.release(hold)

    async def _read(self, request: web.Request) -> bytes:
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit)
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(None, limit) from None

    def _decide(self, parsed: FrontRequest, now: float) -> RouteOutcome:
        try:
            return self.router.route(parsed.route, now)
        except UnknownPoolError as exc:
            raise FrontError(
                404, str(exc), kind=NOT_FOUND, param=POOL_HEADER, code="pool_not_found"
            ) from None
        except NoDestinationError as exc:
            raise FrontError(503, str(exc), kind=UNAVAILABLE, code="no_eligible_engine") from None

    async def _proxy(
        self,
        request: web.Request,
        raw: bytes,
        path: str,
        parsed: FrontRequest,
        outcome: RouteOutcome,
        held: list[Hold],
    ) -> web.StreamResponse:
        """Attempt, retry once on another node if that failed, relay; ``held`` gets the holds."""
        headers = decision_headers(outcome)
        pool = parsed.route.pool
        health = self.passive
        try:
            upstream = await self.upstream.attempt(
                f"{base_url(outcome.address)}{path}", raw, request.headers
            )
        except AttemptFailedError as failed:
            self.metrics.upstream_failures.labels(failed.cause).inc()
            health.failed(pool, outcome.node_id, failed.cause)
            retry = self._retry(parsed, held[0])
            if retry is None:
                return await self._give_up(request, failed, headers)
            if failed.response is not None:
                failed.response.close()
            self.metrics.retries.labels(failed.cause).inc()
            log.info(
                "retrying on another engine",
                failed=outcome.node_id,
                cause=failed.cause,
                detail=failed.detail,
                retry=retry.node_id,
            )
            self.holds.release(held[0])
            held.append(retry)
            address = retry.view.nodes.addresses[retry.node]
            headers = {
                **headers,
                "x-cacheroute-node": retry.node_id,
                "x-cacheroute-retried-from": outcome.node_id,
            }
            headers.pop(SESSION_HEADER, None)  # it named the failed node
            try:
                upstream = await self.upstream.attempt(
                    f"{base_url(address)}{path}", raw, request.headers
                )
            except AttemptFailedError as again:
                self.metrics.upstream_failures.labels(again.cause).inc()
                health.failed(pool, retry.node_id, again.cause)
                return await self._give_up(request, again, headers)
        health.succeeded(pool, headers["x-cacheroute-node"])  # it answered: alive
        return await self._relay(request, upstream, headers, pool)

    def _retry(self, parsed: FrontRequest, hold: Hold) -> Hold | None:
        """A hold on the retry's node (recorded as a decision in the pool's view), or None."""
        state = self.router.pools.get(parsed.route.pool)
        if state is None:
            return None
        view = state.view
        failed = view.nodes.index.get(hold.node_id, -1)
        node = alternate(view, parsed.route.key_hash, failed, self._rng)
        if node is None:
            return None
        now = time.time()
        view.record(node, now)
        return self.holds.take_node(parsed.route.pool, view, node, now)

    async def _give_up(
        self, request: web.Request, failed: AttemptFailedError, headers: dict[str, str]
    ) -> web.StreamResponse:
        if failed.response is not None:  # the engine's own 5xx answer, passed through
            try:
                return await self._relay(request, failed.response, headers, None)
            finally:
                failed.response.close()
        status = 504 if failed.cause == "timeout" else 502
        return FrontError(
            status,
            f"engine {headers['x-cacheroute-node']}: {failed.detail}",
            kind=SERVER_ERROR,
            code=f"engine_{failed.cause}",
        ).response(headers)

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        pool: str | None,
    ) -> web.StreamResponse:
        """Stream the answer; ``pool`` set: a break mid-way counts against the node's health."""
        try:
            response, broken = await relay(request, upstream, headers)
        finally:
            upstream.close()
        if broken is not None:
            if pool is not None:
                self.passive.failed(pool, headers["x-cacheroute-node"], "mid_stream")
            self.metrics.upstream_failures.labels("mid_stream").inc()
            log.warning(
                "engine failed mid-response", node=headers["x-cacheroute-node"], error=repr(broken)
            )
        return response


def _too_large(size: int | None, limit: int) -> FrontError:
    what = f"{size} bytes" if size is not None else "larger than the limit"
    return FrontError(
        413, f"request body is {what}; the limit is {limit} bytes", code="body_too_large"
    )
