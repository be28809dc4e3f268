"""cancel_all ends tasks whose first cancellation was lost, and gives up on one that ignores all.

The lost cancellation is the real one: redis-py's pub/sub subscription against a real Redis,
cancelled while it subscribes (Python 3.11's ``asyncio.wait_for`` drops a cancellation that meets
the result, CPython gh-86296; the router's hint loop then listened forever after its stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import pytest
import redis.asyncio as aioredis

from servekit.tasks import cancel_all

pytestmark = [pytest.mark.redis]


async def swallows_one_cancel() -> None:
    with contextlib.suppress(asyncio.CancelledError):  # a racing wait_for: the request is gone
        await asyncio.sleep(3600)
    await asyncio.sleep(3600)


async def ignores_every_cancel(release: asyncio.Event) -> None:
    while not release.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await release.wait()


async def test_a_task_that_swallowed_its_cancel_is_cancelled_again() -> None:
    task = asyncio.create_task(swallows_one_cancel())
    await asyncio.sleep(0)
    assert await cancel_all([task], timeout_s=30) == set()
    assert task.cancelled()


async def test_a_task_that_ignores_every_cancel_is_returned_after_the_timeout() -> None:
    release = asyncio.Event()
    task = asyncio.create_task(ignores_every_cancel(release))
    await asyncio.sleep(0)
    assert await cancel_all([task], timeout_s=0.5) == {task}
    release.set()
    await task


async def test_subscriptions_cancelled_while_subscribing_all_end(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=2.0, socket_connect_timeout=1.0)

    async def subscription() -> None:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe("a")
            await pubsub.psubscribe("b*")
            async for _ in pubsub.listen():
                pass
        finally:
            await pubsub.aclose()

    rng = random.Random(7)
    try:
        for _ in range(40):  # on Python 3.11 many lose their first cancel
            task = asyncio.create_task(subscription())
            await asyncio.sleep(rng.uniform(0, 0.004))
            assert await cancel_all([task], timeout_s=30) == set()
            assert task.done()
    finally:
        await client.aclose()
