"""Space-Saving heavy hitters, per-pool traffic windows, and the Bernoulli trace sampler."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from cacheroute.v1 import routing_pb2
from dataplane.core.heavy_hitters import FOLD_EVERY, SpaceSaving, TrafficCounter
from dataplane.core.policies import Reason
from dataplane.core.route_input import parse_request
from dataplane.core.router import RouteOutcome
from dataplane.telemetry.sampler import Sampler


def zipf_stream(n: int, keys: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) ** 1.1 for rank in range(keys)]
    return rng.choices(range(keys), weights=weights, k=n)


def test_space_saving_is_exact_while_under_capacity() -> None:
    summary = SpaceSaving(10)
    for key, weight in [(1, 3), (2, 1), (1, 2), (3, 7)]:
        summary.update(key, weight, f"k{key}")
    assert summary.top() == [(3, "k3", 7, 0), (1, "k1", 5, 0), (2, "k2", 1, 0)]


def test_space_saving_bounds_hold_and_heavy_hitters_are_kept() -> None:
    stream = zipf_stream(50_000, 5_000, seed=1)
    truth = Counter(stream)
    summary = SpaceSaving(200)
    for key in stream:
        summary.update(key, 1, str(key))
    top = summary.top()
    assert len(top) == 200
    for key, _label, count, error in top:
        assert count - error <= truth[key] <= count
    threshold = len(stream) / 200
    heavy = {key for key, count in truth.items() if count > threshold}
    assert heavy <= {key for key, *_ in top}
    assert sum(count for _, _, count, _ in top) == len(stream)  # Space-Saving's invariant


def test_weighted_updates_keep_the_same_guarantees() -> None:
    stream = zipf_stream(40_000, 3_000, seed=2)
    truth = Counter(stream)
    summary = SpaceSaving(100)
    for start in range(0, len(stream), 1000):
        for key, weight in Counter(stream[start : start + 1000]).items():
            summary.update(key, weight, str(key))
    for key, _label, count, error in summary.top():
        assert count - error <= truth[key] <= count


def test_a_traffic_counter_reports_total_and_top_keys_then_starts_a_new_window() -> None:
    counter = TrafficCounter(capacity=50)
    stream = zipf_stream(3 * FOLD_EVERY + 17, 1_000, seed=3)
    for key in stream:
        counter.add(key, f"key-{key}")
    report = counter.drain("r1", "blue", 1234)
    assert report is not None
    assert (report.router_id, report.pool, report.window_end_unix_ms) == ("r1", "blue", 1234)
    assert report.total_requests == len(stream)
    assert len(report.top_keys) == 50
    counts = [k.count for k in report.top_keys]
    assert counts == sorted(counts, reverse=True)
    most = Counter(stream).most_common(1)[0][0]
    assert report.top_keys[0].key == f"key-{most}"
    assert report.top_keys[0].key_hash == most
    assert counter.drain("r1", "blue", 2000) is None  # a new, empty window
    counter.add(7, "seven")
    again = counter.drain("r1", "blue", 3000)
    assert again is not None
    assert again.window_start_unix_ms == 2000
    assert again.total_requests == 1


def test_memory_stays_bounded_under_a_stream_of_distinct_keys() -> None:
    counter = TrafficCounter(capacity=64)
    for key in range(100_000):
        counter.add(key, "k")
    assert len(counter._summary) == 64
    assert len(counter._hashes) < FOLD_EVERY


def outcome() -> RouteOutcome:
    return RouteOutcome("a", "a:1", Reason.TAIL, "v", 1)


def test_the_sampler_takes_about_rate_of_the_requests() -> None:
    sampler = Sampler(0.05, router_id="r", capacity=100_000, seed=4)
    inp = parse_request(routing_pb2.RouteRequest(key="k", prompt_prefix="hello world"))
    for _ in range(40_000):
        if sampler.hit():
            sampler.add(inp, outcome(), 1.5)
    assert 1_700 < len(sampler) < 2_300
    sample = sampler.drain()[0]
    assert (sample.key, sample.reason, sample.at_unix_ms, sample.node_id) == (
        "k",
        "tail",
        1500,
        "a",
    )
    assert len(sample.prefix_blocks) == 1  # the prompt's 64-byte blocks, for shadow replay
    assert len(sampler) == 0


@pytest.mark.parametrize(("rate", "expected"), [(0.0, 0), (1.0, 500)])
def test_rates_zero_and_one_take_none_or_all(rate: float, expected: int) -> None:
    sampler = Sampler(rate, router_id="r")
    inp = parse_request(routing_pb2.RouteRequest(key="k"))
    for _ in range(500):
        if sampler.hit():
            sampler.add(inp, outcome(), 0.0)
    assert len(sampler) == expected


def test_a_full_sample_buffer_drops_and_counts() -> None:
    dropped: list[int] = []
    sampler = Sampler(1.0, router_id="r", capacity=10, on_dropped=dropped.append)
    inp = parse_request(routing_pb2.RouteRequest(key="k"))
    for _ in range(25):
        if sampler.hit():
            sampler.add(inp, outcome(), 0.0)
    assert len(sampler) == 10
    assert sum(dropped) == 15


def test_a_rate_outside_zero_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="sample rate"):
        Sampler(1.5, router_id="r")


def _interval(sampler: Sampler, requests: int) -> int:
    """Route ``requests`` through the sampler (one report interval); how many it sampled."""
    inp = parse_request(routing_pb2.RouteRequest(key="k"))
    taken = 0
    for _ in range(requests):
        if sampler.hit():
            sampler.add(inp, outcome(), 0.0)
            taken += 1
    sampler.drain()
    return taken


def test_on_thin_traffic_the_rate_rises_until_it_meets_the_floor() -> None:
    # 2 req/s for 10 minutes at 1%: about 12 samples. With a floor of 1 sample/s the rate
    # climbs towards 0.5 and the window holds hundreds, enough for a shadow replay.
    sampler = Sampler(0.01, router_id="r", seed=1, floor_per_s=1.0)
    taken = 0
    for _ in range(600):  # one-second intervals
        taken += _interval(sampler, 2)
        sampler.adapt(1.0)
    assert sampler.rate > 0.2
    assert taken >= 300
    fixed = Sampler(0.01, router_id="r", seed=1)
    assert sum(_interval(fixed, 2) for _ in range(600)) < 40


def test_on_busy_traffic_the_rate_falls_back_to_the_configured_one() -> None:
    sampler = Sampler(0.01, router_id="r", seed=2, floor_per_s=1.0)
    sampler.rate = 1.0  # as after an idle spell
    for _ in range(5):
        _interval(sampler, 5_000)
        sampler.adapt(1.0)
    assert sampler.rate == 0.01  # 5,000 req/s x 1% = 50 samples/s, above the floor


def test_a_zero_rate_stays_off_and_a_zero_floor_keeps_the_rate_fixed() -> None:
    off = Sampler(0.0, router_id="r", floor_per_s=5.0)
    fixed = Sampler(0.01, router_id="r", floor_per_s=0.0)
    for sampler in (off, fixed):
        for _ in range(10):
            _interval(sampler, 10)
            sampler.adapt(1.0)
    assert (off.rate, fixed.rate) == (0.0, 0.01)
