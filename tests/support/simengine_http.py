"""Talking to the simulated engine's HTTP API in tests: a prompt, JSON posts and parsed SSE streams.

Shared by the API tests of completions, of the prefix cache and of metrics and admin knobs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

PROMPT = "You are a helpful support assistant for ACME. " * 20  # 940 bytes: 15 blocks


SPEEDUP = 20.0


async def post(client: aiohttp.ClientSession, url: str, body: object) -> tuple[int, dict[str, Any]]:
    async with client.post(url, data=json.dumps(body)) as response:
        return response.status, await response.json()


async def stream(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[float], bool]:
    """The parsed SSE chunks, the arrival time of each, and whether [DONE] ended the stream."""
    chunks: list[dict[str, Any]] = []
    times: list[float] = []
    done = False
    async with client.post(url, json={**body, "stream": True}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                done = True
                continue
            chunks.append(json.loads(payload))
            times.append(time.monotonic())
    return chunks, times, done


def text_of(chunks: list[dict[str, Any]], chat: bool) -> str:
    return "".join(
        choice["delta"].get("content", "") if chat else choice["text"]
        for chunk in chunks
        for choice in chunk["choices"]
    )
