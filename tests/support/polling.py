"""Polling a condition in tests: until it holds, or fail the test after a timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 5.0, every: float = 0.01
) -> float:
    """Poll ``check`` until it is true; returns the seconds it took (fails after ``timeout``)."""
    started = time.monotonic()
    while True:
        if await check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(every)
