"""Waiting on an event with a deadline, safely cancellable."""

from __future__ import annotations

import asyncio
import contextlib


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; True when it was set.

    ``asyncio.timeout``, not ``asyncio.wait_for``: in Python 3.11 ``wait_for`` can swallow a
    cancellation that races the wake-up, and a loop built on it then outlives its ``stop()``.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):
            await event.wait()
    return event.is_set()
