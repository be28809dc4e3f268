"""The agents' KV-event subscriber on real ZMQ sockets against a test publisher
(tests/support/kv_events.py): a gap answered by replay, a gap without replay, an engine restart,
garbage and oversize frames, and a reconnect to an engine that came back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import zmq
import zmq.asyncio

from agents.kv_subscriber import KvEventSubscriber, SubscriberConfig
from tests.support.kv_events import (
    ENC,
    Engine,
    batch,
    joined,
    removed,
    running,
    seq,
    stored,
    until,
)


@pytest.fixture
async def publisher() -> AsyncIterator[Engine]:
    eng = Engine()
    task = asyncio.create_task(eng.serve_replay())
    try:
        yield eng
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        eng.close()


async def test_a_gap_is_answered_by_replay_and_nothing_is_lost(publisher: Engine) -> None:
    config = SubscriberConfig(publisher.endpoint, publisher.replay_endpoint)
    async with running(KvEventSubscriber(config)) as sub:
        await joined(publisher, sub)
        await publisher.send(1, batch(stored(1, 2, 3)))
        await publisher.send(2, batch(removed(1), stored(4)), live=False)  # dropped on the way
        await publisher.send(3, batch(stored(5)))
        await until(lambda: sub.last_seq == 3)
        assert publisher.replays == [2]
        assert {b for b in (1, 2, 3, 4, 5, 100) if b in sub.residency} == {2, 3, 4, 5, 100}
        assert (sub.gaps, sub.gaps_unrecovered, sub.replayed) == (1, 0, 2)
        await publisher.send(4, batch(stored(6)))  # the live copy of nothing replayed twice
        await until(lambda: sub.last_seq == 4)
        assert sub.residency.counts().stored == 7 and not sub.dropped


async def test_a_gap_without_replay_clears_the_set_and_is_counted(publisher: Engine) -> None:
    async with running(KvEventSubscriber(SubscriberConfig(publisher.endpoint))) as sub:
        await joined(publisher, sub)
        await publisher.send(5, batch(stored(9)))
        await until(lambda: sub.last_seq == 5)
        assert sub.gaps_unrecovered == 1 and 100 not in sub.residency and 9 in sub.residency


async def test_an_engine_restart_clears_the_blocks(publisher: Engine) -> None:
    config = SubscriberConfig(publisher.endpoint, publisher.replay_endpoint)
    async with running(KvEventSubscriber(config)) as sub:
        await joined(publisher, sub)
        await publisher.send(1, batch(stored(1, 2)))
        await until(lambda: sub.last_seq == 1)
        publisher.buffer.clear()
        await publisher.send(0, batch(["AllBlocksCleared"], stored(7)))  # counter starts again
        await until(lambda: sub.restarts == 1)
        assert len(sub.residency) == 1 and 7 in sub.residency
        assert sub.residency.counts().cleared == 2  # the restart and the event


async def test_garbage_and_oversize_frames_are_counted_never_fatal(publisher: Engine) -> None:
    config = SubscriberConfig(publisher.endpoint, publisher.replay_endpoint, max_frame_bytes=1024)
    async with running(KvEventSubscriber(config)) as sub:
        await joined(publisher, sub)
        await publisher.pub.send_multipart([b"", seq(1)])  # two frames
        await publisher.pub.send_multipart([b"", b"\x01", batch(stored(1))])  # a short seq
        await publisher.send(1, b"\xc1 not msgpack")
        await publisher.send(2, batch(stored(*range(1000, 1500))))  # > 1 KiB
        await publisher.send(3, ENC({"no": "events"}))
        await publisher.send(4, batch(stored(42)))
        await until(lambda: sub.last_seq == 4)
        assert dict(sub.dropped) == {
            "frames": 1, "bad_seq": 1, "garbage": 1, "oversize": 1, "bad_batch": 1,
        }  # fmt: skip
        assert 42 in sub.residency and 1000 not in sub.residency and sub.gaps == 0


async def test_the_subscriber_reconnects_to_an_engine_that_came_back() -> None:
    first = Engine()
    config = SubscriberConfig(first.endpoint)
    async with running(KvEventSubscriber(config)) as sub:
        await joined(first, sub)
        await first.send(1, batch(stored(1, 2)))
        await until(lambda: sub.last_seq == 1)
        first.close()  # the engine goes away ...
        ctx = zmq.asyncio.Context.instance()
        again = ctx.socket(zmq.XPUB)  # ... and comes back on the same port, seq from 0
        again.setsockopt(zmq.LINGER, 0)
        for _ in range(300):  # ZMQ closes the old listener in its I/O thread, a moment later
            try:
                again.bind(first.endpoint)
                break
            except zmq.ZMQError:
                await asyncio.sleep(0.05)
        try:
            assert await again.poll(30_000), "the subscriber never reconnected"
            assert await again.recv() == b"\x01"
            await again.send_multipart([b"", seq(0), batch(stored(9))])
            await until(lambda: sub.restarts == 1)
            assert 9 in sub.residency and 1 not in sub.residency
        finally:
            again.close(linger=0)
