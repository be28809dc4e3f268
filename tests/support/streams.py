"""Streamed chat completions started one by one while an engine is killed part way: what the
front and the Endpoint Picker must survive with no failed request that had not started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import openai


async def streams_through_a_kill(
    api: openai.AsyncOpenAI,
    model: str,
    messages: Sequence[dict[str, Any]],
    kill: Callable[[], None],
    *,
    count: int = 80,
    kill_at: int = 30,
) -> tuple[list[bool], list[tuple[bool, str]]]:
    """Start ``count`` streams 50 ms apart (keys over 13 tenants), call ``kill`` after the
    ``kill_at``-th; per stream whether it began, and (began, error) for each that failed."""
    began_each: list[bool] = []
    failures: list[tuple[bool, str]] = []

    async def one(index: int) -> None:
        began = False
        try:
            stream = await api.chat.completions.create(
                model=model, messages=messages, max_tokens=40, stream=True,  # type: ignore[arg-type]
                extra_body={"prompt_cache_key": f"tenant-{index % 13}"},
            )  # fmt: skip
            async for _chunk in stream:
                began = True
        except Exception as exc:
            failures.append((began, repr(exc)))
        began_each.append(began)

    tasks = []
    for index in range(count):
        tasks.append(asyncio.create_task(one(index)))
        if index == kill_at:
            kill()
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)
    return began_each, failures
