"""A router stopped right after it started ends every loop it ran (the hint subscription among
them, whose cancellation Python 3.11 can lose while it subscribes: servekit.tasks)."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.router import running_router

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


async def test_every_loop_has_ended_when_stop_returns(redis_url: str) -> None:
    rng = random.Random(11)
    for _ in range(8):
        async with running_router(redis_url) as server:
            loops = list(server._tasks)
            assert loops
            await asyncio.sleep(rng.uniform(0, 0.01))
        assert all(task.done() for task in loops), [t for t in loops if not t.done()]
