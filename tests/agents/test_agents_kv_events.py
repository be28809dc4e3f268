"""The agents' KV-event reader on payloads encoded here, independently of any publisher under
test: plain msgpack of vLLM's documented layout (``../shared/docs/CALIBRATION.md`` §3), array-like
and map-encoded, sent over real ZMQ sockets (PUB, and a ROUTER answering replays)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from agents.kv_subscriber import KvEventSubscriber, SubscriberConfig
from agents.kv_wire import Cleared, Removed, Stored, WireError, decode_batch
from agents.residency import Residency
from agents.residency_report import ResidencyReporter
from tests.support.agents import EngineStub, engine
from tests.support.polling import eventually

__all__ = ["engine"]

ENC = msgspec.msgpack.encode


def stored(*hashes: Any, medium: str | None = "GPU", extra: bool = False) -> list[Any]:
    event: list[Any] = ["BlockStored", list(hashes), None, [1, 2, 3], 16, None, medium]
    return [*event, "a field from a newer vLLM"] if extra else event


def removed(*hashes: Any) -> list[Any]:
    return ["BlockRemoved", list(hashes), "GPU"]


def batch(*events: Any) -> bytes:
    return ENC([1700000000.5, list(events), 0])


async def until(condition: Callable[[], bool]) -> None:
    async def check() -> bool:
        return condition()

    await eventually(check, timeout=30.0)


def seq(n: int) -> bytes:
    return n.to_bytes(8, "big")


# -- decoding --------------------------------------------------------------------------------


def test_array_like_events_decode_and_newer_trailing_fields_are_ignored() -> None:
    decoded = decode_batch(batch(stored(1, 2, extra=True), removed(1), ["AllBlocksCleared"]))
    assert decoded.events == (Stored((1, 2)), Removed((1,)), Cleared())
    assert decoded.ts == 1700000000.5 and decoded.skipped == 0


def test_map_encoded_events_and_batch_decode_with_unknown_keys() -> None:
    payload = ENC(
        {
            "ts": 3.0,
            "events": [
                {"type": "BlockStored", "block_hashes": [7, 8], "medium": None, "new": {"x": 1}},
                {"type": "BlockRemoved", "block_hashes": [7]},
                {"type": "AllBlocksCleared"},
            ],
            "data_parallel_rank": None,
            "something_new": [1, 2],
        }
    )
    assert decode_batch(payload).events == (Stored((7, 8)), Removed((7,)), Cleared())


def test_bytes_and_signed_hashes_become_unsigned_64_bit_ids() -> None:
    digest = bytes(range(32))  # newer vLLM: sha256 digests
    events = decode_batch(batch(stored(digest, -1))).events
    assert events == (Stored((int.from_bytes(digest[-8:], "big"), 2**64 - 1)),)


def test_unknown_event_types_and_cpu_blocks_are_skipped_not_fatal() -> None:
    decoded = decode_batch(batch(["BlockMoved", [1]], stored(5, medium="CPU"), stored(6)))
    assert decoded.events == (Stored((6,)),) and decoded.skipped == 2


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1\xc1garbage", "garbage"),
        (ENC("a string"), "bad_batch"),
        (ENC([1.0, "not a list"]), "bad_batch"),
        (ENC([1.0, [["BlockStored", "not hashes"]]]), "bad_event"),
        (ENC([1.0, [["BlockStored", [True]]]]), "bad_hash"),
        (ENC([1.0, [42]]), "bad_event"),
    ],
)
def test_malformed_payloads_raise_a_wire_error_with_a_reason(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError) as caught:
        decode_batch(payload)
    assert caught.value.reason == reason


def test_residency_is_bounded_and_counts_what_it_could_not_hold() -> None:
    residency = Residency(max_blocks=3)
    residency.apply((Stored((1, 2, 3, 4)), Removed((2,)), Stored((5,))))
    counts = residency.counts()
    assert (counts.resident, counts.stored, counts.removed, counts.overflow) == (3, 5, 1, 1)
    assert residency.resident_run((1, 3, 5)) == 3 and residency.resident_run((4, 1)) == 0
    residency.apply((Cleared(), Stored((9,))))
    assert len(residency) == 1 and 9 in residency and residency.counts().cleared == 1


# -- the subscriber over real sockets ----------------------------------------------------------


class Engine:
    """A test publisher: an XPUB socket and a ROUTER that replays what ``buffer`` holds."""

    def __init__(self) -> None:
        ctx = zmq.asyncio.Context.instance()
        self.pub = ctx.socket(zmq.XPUB)  # a PUB that tells when a subscriber has joined
        self.pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = self._bind(self.pub)
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.replay_endpoint = self._bind(self.router)
        self.buffer: dict[int, bytes] = {}
        self.replays: list[int] = []

    @staticmethod
    def _bind(sock: zmq.asyncio.Socket) -> str:
        sock.bind("tcp://127.0.0.1:*")
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(endpoint, bytes)
        return endpoint.decode()

    async def serve_replay(self) -> None:
        while True:
            client, _, start_frame = await self.router.recv_multipart()
            start = int.from_bytes(start_frame, "big")
            self.replays.append(start)
            for n in sorted(self.buffer):
                if n >= start:
                    await self.router.send_multipart([client, b"", seq(n), self.buffer[n]])
            end = (-1).to_bytes(8, "big", signed=True)
            await self.router.send_multipart([client, b"", end, b""])

    async def send(self, n: int, payload: bytes, *, live: bool = True) -> None:
        self.buffer[n] = payload
        if live:
            await self.pub.send_multipart([b"", seq(n), payload])

    def close(self) -> None:
        self.pub.close(linger=0)
        self.router.close(linger=0)


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


@contextlib.asynccontextmanager
async def running(sub: KvEventSubscriber) -> AsyncIterator[KvEventSubscriber]:
    task = asyncio.create_task(sub.run())
    try:
        yield sub
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def joined(engine: Engine, sub: KvEventSubscriber) -> None:
    """Publish seq 0 once the SUB socket has joined (ZMQ connects asynchronously)."""
    assert await engine.pub.poll(30_000), "the subscriber never joined"
    assert await engine.pub.recv() == b"\x01"  # subscribe to every topic
    await engine.send(0, batch(stored(100)))
    await until(lambda: sub.seen)


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


# -- the report section ------------------------------------------------------------------------


async def test_the_report_section_answers_the_watch_once_the_block_names_agree() -> None:
    sub = KvEventSubscriber(SubscriberConfig("tcp://127.0.0.1:1"))
    clock = iter([10.0, 11.0, 12.0, 13.0])
    reporter = ResidencyReporter(sub, clock=lambda: next(clock))
    assert reporter.section() is None  # no batch yet: the report stays as without events
    await sub.receive([b"", seq(0), batch(stored(1, 2, 3))])
    foreign = ("p1", ((100, 900), (200, 901)))  # anchors this engine never names
    first = reporter.section(foreign)
    assert first is not None and first.resident_blocks == 3 and not first.watch_version
    await sub.receive([b"", seq(1), batch(removed(1, 2), stored(4))])
    second = reporter.section(foreign)
    assert second is not None and (second.evictions_per_s, second.stores_per_s) == (2.0, 1.0)
    watch = ("p2", ((100, 3), (200, 2)))
    answered = reporter.section(watch)
    assert answered is not None and answered.watch_version == "p2"
    assert answered.watched_keys == 2 and list(answered.absent_keys) == [200]
    await sub.receive([b"", seq(2), batch(["AllBlocksCleared"])])
    after = reporter.section(watch)  # names agreed once: an emptied cache is all absent
    assert after is not None and list(after.absent_keys) == [100, 200]


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


async def test_an_agent_whose_engine_publishes_nothing_reports_as_without_events(
    engine: EngineStub,
) -> None:
    silent = Engine()  # a publisher socket that never sends
    engine.serve("sim_a")
    async with aiohttp.ClientSession() as session:

        def agent(**kv: str) -> Agent:
            config = AgentConfig(
                node_id="n1", address="127.0.0.1:1", metrics_url=f"{engine.url}/metrics", **kv
            )
            return Agent(
                config, session=session, controlplane="127.0.0.1:9", metrics=AgentMetrics()
            )

        plain = agent()
        with_events = agent(kv_events=silent.endpoint, kv_replay=silent.replay_endpoint)
        assert plain.residency is None and with_events.residency is not None
        task = asyncio.create_task(with_events.residency.subscriber.run())
        try:
            await asyncio.sleep(0.3)
            reports = [a.build_report(await a.scraper.scrape()) for a in (plain, with_events)]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            silent.close()
    for report in reports:
        report.scraped_at_unix_ms = 0
    assert not reports[1].HasField("residency") and reports[0] == reports[1]
