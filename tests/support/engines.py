"""Engines that fail on purpose, one that records what it got, and a raw POST (HTTP front tests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

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


class Recorded:
    """What a recording engine received: (path, headers, body) per request."""

    def __init__(self) -> None:
        # headers case-insensitive, as HTTP's are
        self.requests: list[tuple[str, CIMultiDict[str], bytes]] = []


@asynccontextmanager
async def recording_engine(cached_tokens: int = 0) -> AsyncIterator[tuple[str, Recorded]]:
    """A real HTTP server that records every POST and answers a small OpenAI-style JSON body
    (with ``usage.prompt_tokens_details.cached_tokens``) on any path."""
    seen = Recorded()

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.requests.append((request.path, CIMultiDict(request.headers), await request.read()))
        usage = {"prompt_tokens": 8, "prompt_tokens_details": {"cached_tokens": cached_tokens}}
        return web.json_response({"object": "answer", "path": request.path, "usage": usage})

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()
