"""The HTTP front's per-attempt relay: try the chosen engine, retry once elsewhere, relay.

Apart from the routes (:mod:`~dataplane.http_front.app`) because this is the part with failure
rules: a connect error, a 5xx or the first-byte timeout is retried once on another node
(:mod:`~dataplane.http_front.choose`), every attempt's outcome goes to passive health, and after
the first byte reached the client nothing is retried (a break mid-stream counts against the node).
"""

from __future__ import annotations

import random
import time

import aiohttp
import structlog
from aiohttp import web

from dataplane.core.router import RouteOutcome, Router
from dataplane.health.passive_health import PassiveHealth
from dataplane.http_front.choose import alternate
from dataplane.http_front.first_byte import FirstByteTimeouts
from dataplane.http_front.metrics import FrontMetrics
from dataplane.http_front.proxy import AttemptFailedError, Upstream, base_url, relay
from dataplane.openai_api.errors import SERVER_ERROR, FrontError
from dataplane.openai_api.request_keys import SESSION_HEADER, FrontRequest
from dataplane.requests.holds import Hold, Holds
from dataplane.telemetry.served_metrics import AnswerTimer

log = structlog.get_logger("dataplane.http_front")


def decision_headers(outcome: RouteOutcome) -> dict[str, str]:
    return {
        "x-cacheroute-node": outcome.node_id,
        "x-cacheroute-reason": str(outcome.reason),
        "x-cacheroute-version": outcome.version,
        "x-cacheroute-generation": str(outcome.generation),
        SESSION_HEADER: outcome.session_token,
    }


class AttemptRelay:
    """One decided request's attempts against engines, and the relay of the one that answered."""

    def __init__(
        self,
        router: Router,
        holds: Holds,
        passive: PassiveHealth,
        metrics: FrontMetrics,
        upstream: Upstream,
        first_byte: FirstByteTimeouts,
        seed: int,
    ) -> None:
        self.router = router
        self.holds = holds
        self.passive = passive
        self.metrics = metrics
        self.upstream = upstream
        self.first_byte = first_byte
        self._rng = random.Random(seed)

    async def proxy(
        self,
        request: web.Request,
        raw: bytes,
        path: str,
        parsed: FrontRequest,
        outcome: RouteOutcome,
        held: list[Hold],
        timer: AnswerTimer,
    ) -> web.StreamResponse:
        """Attempt, retry once on another node if that failed, relay; ``held`` gets the holds."""
        headers = decision_headers(outcome)
        pool = parsed.route.pool
        health = self.passive
        try:
            upstream = await self._attempt(
                f"{base_url(outcome.address)}{path}", raw, request, outcome.node_id, parsed.stream
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
                upstream = await self._attempt(
                    f"{base_url(address)}{path}", raw, request, retry.node_id, parsed.stream
                )
            except AttemptFailedError as again:
                self.metrics.upstream_failures.labels(again.cause).inc()
                health.failed(pool, retry.node_id, again.cause)
                return await self._give_up(request, again, headers)
        health.succeeded(pool, headers["x-cacheroute-node"])  # it answered: alive
        timer.serving(parsed.route.key_hash, headers["x-cacheroute-node"])
        timer.node = headers["x-cacheroute-node"]  # its TTFT counts for this node
        return await self._relay(request, upstream, headers, pool, timer)

    async def _attempt(
        self, url: str, raw: bytes, request: web.Request, node_id: str, stream: bool
    ) -> aiohttp.ClientResponse:
        """One attempt under the engine's own first-byte timeout (:mod:`.first_byte`)."""
        started = time.monotonic()
        wait = self.first_byte.timeout_for(node_id, stream)
        upstream = await self.upstream.attempt(url, raw, request.headers, wait)
        self.first_byte.observe(node_id, stream, time.monotonic() - started)
        return upstream

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
        timer: AnswerTimer | None = None,
    ) -> web.StreamResponse:
        """Stream the answer; ``pool`` set: a break mid-way counts against the node's health."""
        try:
            response, broken = await relay(
                request, upstream, headers, timer.chunk if timer is not None else None
            )
        finally:
            upstream.close()
        if broken is not None:
            if timer is not None:
                timer.finish(completed=False)
            if pool is not None:
                self.passive.failed(pool, headers["x-cacheroute-node"], "mid_stream")
            self.metrics.upstream_failures.labels("mid_stream").inc()
            log.warning(
                "engine failed mid-response", node=headers["x-cacheroute-node"], error=repr(broken)
            )
        return response
