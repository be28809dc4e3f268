"""Polling a condition in tests: until it holds, or fail the test after a timeout.

The timeout is patience, not a claim (a bound the product promises goes through
``LagMeter.claim``): it counts the machine's seconds (:class:`tests.support.timing.StartDeadline`),
so a loaded machine that takes this process's time does not fail a right answer (issue 34).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from tests.support.timing import StartDeadline


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 5.0, every: float = 0.01
) -> float:
    """Poll ``check`` until it is true; returns the (wall) seconds it took (fails after
    ``timeout`` seconds of the machine's time)."""
    started = time.monotonic()
    with StartDeadline(timeout) as deadline:
        while True:
            if await check():
                return time.monotonic() - started
            if deadline.expired():
                raise AssertionError(f"condition not met in {deadline.describe()}")
            await asyncio.sleep(every)
