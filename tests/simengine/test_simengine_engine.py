"""The real-time driver of one simulated node: steps, first tokens, counters, reset, stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from sim.engine_model import LLAMA_8B, LLAMA_70B
from simengine.realtime_engine import SimEngine
from simengine.tickets import EngineRequest, RequestTooLargeError, Ticket


@pytest.fixture
async def engine() -> AsyncIterator[SimEngine]:
    eng = SimEngine(LLAMA_8B.with_overrides(kv_blocks=1000), speedup=50.0)
    eng.start()
    try:
        yield eng
    finally:
        await eng.stop()


def request(blocks: range | list[int], output: int = 4) -> EngineRequest:
    ids = tuple(blocks)
    return EngineRequest(ids, 16 * len(ids), output)


async def finish(ticket: Ticket) -> Ticket:
    await asyncio.wait_for(ticket.done.wait(), 10)
    return ticket


async def test_a_request_gets_its_first_token_then_every_output_token(engine: SimEngine) -> None:
    ticket = engine.submit(request(range(1, 11), output=5))
    assert engine.tokens_out(ticket) == 0
    await asyncio.wait_for(ticket.first_token.wait(), 10)
    assert engine.tokens_out(ticket) >= 1
    await finish(ticket)
    assert engine.tokens_out(ticket) == 5
    assert ticket.error is None
    assert ticket.first_token_wall >= ticket.submitted_wall
    assert ticket.finished_wall >= ticket.first_token_wall
    stats = engine.stats
    assert (stats.prompt_tokens, stats.prefix_queries, stats.prefix_hits) == (160, 160, 0)
    assert stats.generation_tokens == 5
    assert stats.requests_finished == 1
    assert stats.ttft_count == 1


async def test_a_repeated_prefix_is_served_from_the_cache(engine: SimEngine) -> None:
    first = await finish(engine.submit(request(range(1, 11))))
    second = await finish(engine.submit(request([1, 2, 3, 4, 99])))
    third = await finish(engine.submit(request(range(1, 11))))
    assert first.cached_tokens == 0
    assert second.cached_tokens == 4 * 16
    assert third.cached_tokens == 10 * 16 - 1  # the last prompt token is always computed
    assert engine.stats.prefix_hits == 64 + 159


async def test_steps_take_their_modelled_time_divided_by_the_speedup() -> None:
    eng = SimEngine(LLAMA_70B, speedup=2.0)
    eng.start()
    try:
        tokens = 4000
        blocks = tuple(range(1, 251))
        started = time.monotonic()
        ticket = eng.submit(EngineRequest(blocks, tokens, 2))
        await asyncio.wait_for(ticket.done.wait(), 10)
    finally:
        await eng.stop()
    prefill_ms = LLAMA_70B.prefill_overhead_ms + LLAMA_70B.prefill_chunk_ms(tokens, tokens)
    decode_ms = LLAMA_70B.step_ms(0.0, 1, tokens + 1)
    # Lower bounds: the loop sleeps until each step's modelled end (prefill, then one decode).
    assert ticket.first_token_wall - started >= 0.95 * prefill_ms / 1000.0 / 2.0
    assert ticket.finished_wall - started >= 0.95 * (prefill_ms + decode_ms) / 1000.0 / 2.0
    assert eng.steps == 2


async def test_concurrent_requests_are_batched(engine: SimEngine) -> None:
    tickets = [engine.submit(request(range(100 * i, 100 * i + 4), output=20)) for i in range(8)]
    await asyncio.gather(*(finish(t) for t in tickets))
    # One prefill step for all eight, then 19 decode steps: far fewer than 8 x 20.
    assert engine.steps == 20
    assert engine.stats.generation_tokens == 8 * 20


async def test_running_waiting_and_kv_usage_follow_the_node(engine: SimEngine) -> None:
    assert (engine.running, engine.waiting, engine.kv_usage) == (0, 0, 0.0)
    ticket = engine.submit(request(range(1, 5), output=200))
    assert engine.waiting == 1
    await asyncio.wait_for(ticket.first_token.wait(), 10)
    assert (engine.running, engine.waiting) == (1, 0)
    assert engine.kv_usage == pytest.approx((4 + 200 // 16) / 1000, abs=2 / 1000)
    await finish(ticket)
    assert engine.kv_usage == 0.0  # cached but unpinned blocks count as free, as in vLLM


async def test_a_request_larger_than_the_cache_is_refused(engine: SimEngine) -> None:
    with pytest.raises(RequestTooLargeError, match="needs 1001 KV blocks"):
        engine.submit(EngineRequest((1,), 16, 1000 * 16))


async def test_reset_is_refused_while_busy_and_empties_the_cache_when_idle(
    engine: SimEngine,
) -> None:
    ticket = engine.submit(request(range(1, 5), output=50))
    assert not engine.reset_prefix_cache()
    await finish(ticket)
    assert engine.reset_prefix_cache()
    again = await finish(engine.submit(request(range(1, 5))))
    assert again.cached_tokens == 0
    assert engine.stats.cache_resets == 1
    assert engine.stats.prompt_tokens == 2 * 64  # counters survive the reset


async def test_stop_ends_requests_in_flight_with_an_error() -> None:
    eng = SimEngine(LLAMA_8B, speedup=1.0)
    eng.start()
    ticket = eng.submit(request(range(1, 5), output=10_000))
    await asyncio.wait_for(ticket.first_token.wait(), 10)
    step = eng.step_event()
    await eng.stop()
    assert ticket.done.is_set()
    assert ticket.error == "engine stopped"
    assert step.is_set()
    assert eng.tokens_out(ticket) == 0


def test_speedup_must_be_positive() -> None:
    with pytest.raises(ValueError, match="speedup"):
        SimEngine(LLAMA_8B, speedup=0.0)
