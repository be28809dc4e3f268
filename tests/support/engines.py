"""Engines that fail on purpose, and a raw POST, for the HTTP front failure tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web

BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}'


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


async def post_raw(url: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
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
