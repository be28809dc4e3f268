"""The two subprocess roles of ``bench_http_front.py``: the bare pass-through and the client.

The pass-through is the baseline (forward the body, relay the answer chunk by chunk); the client
is a closed loop of N streams that prints its TTFT samples and throughput as JSON. Both run as
subcommands of ``bench_http_front.py`` (``bare``, ``client``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from aiohttp import web

HOST = "127.0.0.1"
BODY = {
    "prompt": "benchmark prompt for the front",
    "max_tokens": 16,
    "stream": True,
}


def bare(port: int, upstream: str) -> None:
    """The baseline: forward the body, relay the answer chunk by chunk, nothing more."""

    async def main() -> None:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            async with session.post(
                f"{upstream}{request.path}",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as answer:
                response = web.StreamResponse(status=answer.status)
                response.content_type = answer.content_type
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response

        app = web.Application()
        app.router.add_post("/v1/completions", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, port).start()
        await asyncio.Event().wait()

    asyncio.run(main())


def client(url: str, streams: int, duration_s: float) -> None:
    """Closed loop of ``streams`` workers for ``duration_s``; prints TTFTs and the count as JSON."""

    async def main() -> dict[str, Any]:
        ttfts: list[float] = []
        done = 0
        errors = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def worker(w: int) -> None:
                nonlocal done, errors
                end = time.perf_counter() + duration_s
                i = 0
                while time.perf_counter() < end:
                    body = json.dumps({**BODY, "prompt_cache_key": f"key-{w}-{i % 8}"})
                    i += 1
                    started = time.perf_counter()
                    try:
                        async with session.post(
                            url, data=body, headers={"Content-Type": "application/json"}
                        ) as response:
                            first = True
                            async for _chunk in response.content.iter_any():
                                if first:
                                    ttfts.append(time.perf_counter() - started)
                                    first = False
                            if response.status == 200:
                                done += 1
                            else:
                                errors += 1
                    except aiohttp.ClientError:
                        errors += 1

            # warm the connections, then measure
            await asyncio.gather(*(worker(w) for w in range(streams)))
        return {"ttft": ttfts, "done": done, "errors": errors, "seconds": duration_s}

    print(json.dumps(asyncio.run(main())))
