"""Retries before the first byte, never after: real HTTP servers that fail in each way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from cacheroute_state import Stores
from tests.dataplane.http_front.conftest import SimEngines, front_url, running_front
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'
STREAM_BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true}'


@asynccontextmanager
async def failing_engine(mode: str) -> AsyncIterator[str]:
    """A real HTTP server on loopback that answers every completion in one broken way."""
    hits: list[int] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        hits.append(1)
        if mode == "500":
            return web.json_response({"error": {"message": "engine overloaded"}}, status=500)
        if mode == "hang":
            await asyncio.sleep(3600)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices": [{"delta": {"content": "par"}}]}\n\n')
        assert request.transport is not None
        request.transport.close()  # dies after the first bytes
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _post(url: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/v1/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        try:
            data = await response.read()
        except aiohttp.ClientPayloadError:
            data = b"<cut>"
        return response.status, dict(response.headers), data


@pytest.mark.parametrize(("mode", "cause"), [("500", "5xx"), ("hang", "timeout")])
async def test_a_failure_before_the_first_byte_is_retried_once_on_another_engine(
    redis_url: str, stores: Stores, shared_engines: SimEngines, mode: str, cause: str
) -> None:
    async with failing_engine(mode) as bad:
        # only the bad engine is eligible at first: the router's own decision must be it
        addresses = [bad, shared_engines.addresses[0]]
        async with running_front(redis_url, stores, addresses, first_byte_timeout_s=0.5) as server:
            view = server.router.pools["default"].view
            view.loads[1] = 1000.0  # p2c prefers the bad one (loads set as a snapshot would)
            status, headers, data = await _post(front_url(server), BODY)
            assert status == 200, data
            assert headers["x-cacheroute-node"] == "node-1"
            assert headers["x-cacheroute-retried-from"] == "node-0"
            assert b"choices" in data
            assert metric_sum(server, "cacheroute_router_http_retries_total", cause=cause) == 1
            assert in_flight(server) == {}


async def test_with_no_other_engine_the_engines_5xx_passes_through(
    redis_url: str, stores: Stores
) -> None:
    async with failing_engine("500") as bad, running_front(redis_url, stores, [bad]) as server:
        status, headers, data = await _post(front_url(server), BODY)
        assert status == 500
        assert b"engine overloaded" in data
        assert headers["x-cacheroute-node"] == "node-0"
        assert metric_sum(server, "cacheroute_router_http_retries_total") == 0


async def test_a_connect_error_with_nowhere_else_is_an_openai_style_502(
    redis_url: str, stores: Stores
) -> None:
    async with failing_engine("500") as bad:
        pass  # the port is free again: connections are refused
    async with running_front(redis_url, stores, [bad]) as server:
        status, _, data = await _post(front_url(server), BODY)
        assert status == 502
        assert b'"code":"engine_connect"' in data
        assert in_flight(server) == {}


async def test_nothing_is_retried_after_bytes_reached_the_client(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with failing_engine("cut") as bad:
        addresses = [bad, shared_engines.addresses[0]]
        async with running_front(redis_url, stores, addresses) as server:
            server.router.pools["default"].view.loads[1] = 1000.0
            status, headers, data = await _post(front_url(server), STREAM_BODY)
            assert status == 200
            assert headers["x-cacheroute-node"] == "node-0"
            assert b"par" in data and b"engine_mid_stream" in data  # an SSE error event last
            assert metric_sum(server, "cacheroute_router_http_retries_total") == 0
            mid = metric_sum(
                server, "cacheroute_router_http_upstream_failures_total", cause="mid_stream"
            )
            assert mid == 1
            assert in_flight(server) == {}
