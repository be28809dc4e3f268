"""The agents' KV-event reader on payloads encoded in the tests, independently of any publisher
under test (tests/support/kv_events.py: plain msgpack of vLLM's documented layout, array-like and
map-encoded); the bounded block set; the report section; an agent whose engine publishes nothing.
The subscriber on real sockets (gaps, replay, restarts, drops): test_agents_kv_subscriber.py."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from agents.kv_subscriber import KvEventSubscriber, SubscriberConfig
from agents.kv_wire import Cleared, Removed, Stored, WireError, decode_batch
from agents.residency import Residency
from agents.residency_report import ResidencyReporter
from tests.support.agents import EngineStub, engine
from tests.support.kv_events import ENC, Engine, batch, removed, seq, stored

__all__ = ["engine"]


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
