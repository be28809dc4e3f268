"""What a load run reports: measured window, token-weighted hit rate, percentiles, imbalance."""

from __future__ import annotations

import pytest

from cachectl.loadgen.results import Outcome, imbalance, percentile, summarize


def done(
    index: int,
    *,
    node: str = "a",
    ttft: float = 0.1,
    prompt: int = 100,
    cached: int = 50,
    measured: bool = True,
    reason: str = "warm",
) -> Outcome:
    o = Outcome(index, f"k{index}", measured, scheduled=float(index))
    o.started = float(index)
    o.routed = o.started + 0.001
    o.node_id = node
    o.reason = reason
    o.first_token = o.started + ttft
    o.finished = o.first_token + 1.0
    o.prompt_tokens, o.cached_tokens, o.output_tokens = prompt, cached, 10
    return o


def failed(index: int, error: str, *, measured: bool = True) -> Outcome:
    o = Outcome(index, f"k{index}", measured, scheduled=float(index))
    o.started = float(index)
    o.error = error
    return o


def test_only_measured_requests_count() -> None:
    outcomes = [done(0, measured=False, ttft=9.0, cached=0), done(1), done(2)]
    summary = summarize(outcomes)
    assert summary.requests == 2
    assert summary.ttft_p99_s == pytest.approx(0.1)
    assert summary.hit_rate == 0.5


def test_hit_rate_is_weighted_by_prompt_tokens() -> None:
    summary = summarize([done(0, prompt=900, cached=900), done(1, prompt=100, cached=0)])
    assert summary.hit_rate == pytest.approx(0.9)
    assert (summary.prompt_tokens, summary.cached_tokens) == (1000, 900)


def test_percentiles_interpolate_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([], 99) == 0.0
    summary = summarize([done(i, ttft=0.01 * (i + 1)) for i in range(100)])
    assert summary.ttft_p50_s == pytest.approx(0.505)
    assert summary.ttft_p99_s == pytest.approx(0.9901)


def test_errors_are_counted_by_kind_and_excluded_from_latency() -> None:
    outcomes = [done(0), failed(1, "route:UNAVAILABLE"), failed(2, "engine:connect")]
    outcomes.append(failed(3, "timeout", measured=False))
    summary = summarize(outcomes)
    assert summary.failed == 2
    assert summary.completed == 1
    assert summary.errors == {"route:UNAVAILABLE": 1, "engine:connect": 1, "timeout": 1}
    assert summary.ttft_p50_s == pytest.approx(0.1)


def test_imbalance_counts_known_destinations_that_got_nothing() -> None:
    outcomes = [done(0, node="a"), done(1, node="a"), done(2, node="b"), done(3, node="b")]
    assert summarize(outcomes).imbalance == 1.0
    summary = summarize(outcomes, ["a", "b", "c", "d"])
    assert summary.per_engine == {"a": 2, "b": 2, "c": 0, "d": 0}
    assert summary.imbalance == 2.0
    assert imbalance({}, ()) == 1.0


def test_reasons_throughput_and_generations() -> None:
    outcomes = [done(i, reason="warm" if i % 4 else "tail") for i in range(8)]
    for o in outcomes[4:]:
        o.generation = 2
    summary = summarize(outcomes)
    assert summary.reasons == {"warm": 6, "tail": 2}
    assert summary.generations == [0, 2]
    # 8 requests scheduled one second apart: an 8 s window.
    assert summary.window_s == pytest.approx(8.0)
    assert summary.throughput_rps == pytest.approx(1.0)
    assert summary.output_tokens_per_s == pytest.approx(10.0)
    doc = summary.to_dict()
    assert doc["reasons"] == {"tail": 2, "warm": 6}
    assert set(doc) >= {"hit_rate", "ttft_p50_s", "ttft_p99_s", "imbalance", "errors"}
