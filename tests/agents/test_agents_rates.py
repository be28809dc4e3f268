"""agents.counter_rates: counter deltas → interval rates; a restart skips the interval."""

from __future__ import annotations

import dataclasses

import pytest

from agents import dialects
from agents.counter_rates import RateTracker
from agents.dialects import EngineSample

BASE = EngineSample(
    dialect=dialects.VLLM_V1,
    kind=dialects.KIND[dialects.VLLM_V1],
    model="m",
    running=1,
    waiting=0,
    kv_usage=0.1,
    prefix_hits=800_000,
    prefix_queries=1_200_000,
    prompt_tokens=1_200_000,
    generation_tokens=350_000,
    process_start=1.0e9,
)


def later(sample: EngineSample, **changes: float | int | None) -> EngineSample:
    return dataclasses.replace(sample, **changes)  # type: ignore[arg-type]


def test_first_scrape_has_no_interval() -> None:
    rates = RateTracker().update(BASE, at_s=10.0)
    assert rates.prefix_hit_rate is None
    assert (rates.prompt_tokens_per_s, rates.generation_tokens_per_s, rates.reset) == (0, 0, False)


def test_hit_rate_and_throughput_come_from_counter_deltas() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=10.0)
    rates = tracker.update(
        later(
            BASE,
            prefix_hits=803_000,
            prefix_queries=1_204_000,
            prompt_tokens=1_204_000,
            generation_tokens=351_000,
        ),
        at_s=10.5,
    )
    assert rates.prefix_hit_rate == pytest.approx(0.75)
    assert rates.prompt_tokens_per_s == pytest.approx(8_000)
    assert rates.generation_tokens_per_s == pytest.approx(2_000)


def test_a_counter_reset_skips_the_interval_and_rebases() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=10.0)
    restarted = later(
        BASE, prefix_hits=1_000, prefix_queries=6_000, prompt_tokens=6_000, generation_tokens=2_000
    )
    rates = tracker.update(restarted, at_s=10.25)
    assert rates.reset
    assert rates.prefix_hit_rate is None
    assert (rates.prompt_tokens_per_s, rates.generation_tokens_per_s) == (0.0, 0.0)
    after = tracker.update(
        later(restarted, prefix_hits=1_500, prefix_queries=7_000, prompt_tokens=7_000),
        at_s=10.5,
    )
    assert not after.reset
    assert after.prefix_hit_rate == pytest.approx(0.5)
    assert after.prompt_tokens_per_s == pytest.approx(4_000)


@pytest.mark.parametrize("field", ["prefix_hits", "prefix_queries", "generation_tokens"])
def test_any_single_counter_going_down_is_a_restart(field: str) -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=1.0)
    grown = later(
        BASE,
        prefix_hits=900_000,
        prefix_queries=1_300_000,
        prompt_tokens=1_300_000,
        generation_tokens=360_000,
    )
    rates = tracker.update(later(grown, **{field: 5.0}), at_s=2.0)
    assert rates.reset and rates.prefix_hit_rate is None
    assert rates.prompt_tokens_per_s >= 0 and rates.generation_tokens_per_s >= 0


def test_a_new_process_start_time_is_a_restart_even_when_counters_grew() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=1.0)
    rates = tracker.update(
        later(BASE, prefix_hits=2e6, prefix_queries=3e6, process_start=1.1e9), at_s=60.0
    )
    assert rates.reset and rates.prefix_hit_rate is None


def test_a_dialect_change_is_a_restart() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=1.0)
    moved = later(BASE, prefix_hits=900_000, prefix_queries=1_300_000)
    rates = tracker.update(dataclasses.replace(moved, dialect=dialects.VLLM_V0), at_s=2.0)
    assert rates.reset


def test_no_queries_in_the_interval_leaves_the_hit_rate_absent() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=1.0)
    assert tracker.update(BASE, at_s=1.25).prefix_hit_rate is None


def test_hits_outrunning_queries_are_clamped_to_one() -> None:
    tracker = RateTracker()
    tracker.update(BASE, at_s=1.0)
    rates = tracker.update(later(BASE, prefix_hits=800_010, prefix_queries=1_200_005), at_s=2.0)
    assert rates.prefix_hit_rate == 1.0


def test_an_engine_without_counters_reports_its_own_gauge() -> None:
    v0 = later(BASE, prefix_hits=None, prefix_queries=None, hit_rate_gauge=0.6)
    tracker = RateTracker()
    assert tracker.update(v0, at_s=1.0).prefix_hit_rate == 0.6
    assert tracker.update(v0, at_s=1.25).prefix_hit_rate == 0.6


def test_a_negative_gauge_means_prefix_caching_is_off() -> None:
    v0 = later(BASE, prefix_hits=None, prefix_queries=None, hit_rate_gauge=-1.0)
    assert RateTracker().update(v0, at_s=1.0).prefix_hit_rate is None


def test_counters_win_over_the_lifetime_gauge() -> None:
    sglang = later(BASE, hit_rate_gauge=0.1)
    tracker = RateTracker()
    assert tracker.update(sglang, at_s=1.0).prefix_hit_rate is None
    rates = tracker.update(later(sglang, prefix_hits=800_900, prefix_queries=1_201_000), 2.0)
    assert rates.prefix_hit_rate == pytest.approx(0.9)
