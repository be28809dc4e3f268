"""The rate estimator: exact on steady traffic, sums routers, tail, decay, persistence."""

from __future__ import annotations

import json
import math

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.cluster.key_rate_tracker import RateTracker, current_rates, load_estimator
from controlplane.core.rates import RateEstimator, RateStateError
from controlplane.metrics import ControlPlaneMetrics
from dataplane.core.keys import hash_key
from tests.support.controlplane import traffic


def rates_by_key(est: RateEstimator) -> dict[str, float]:
    snap = est.snapshot()
    return {snap.labels[int(h)]: float(r) for h, r in zip(snap.key_hashes, snap.rates, strict=True)}


def test_steady_traffic_from_two_routers_is_estimated_from_the_first_window() -> None:
    est = RateEstimator(60.0)
    for window in range(3):
        for router in ("r1", "r2"):  # each router sees half: a = 30/s, b = 8/s, total 100/s
            est.observe(traffic(router, window, {"a": 150, "b": 40}, total=500))
        rates = rates_by_key(est)
        assert rates["a"] == pytest.approx(30, rel=1e-3)
        assert rates["b"] == pytest.approx(8, rel=1e-3)
        assert est.snapshot().total_rate == pytest.approx(100, rel=1e-3)
    assert est.snapshot().tail_rate == pytest.approx(62, rel=1e-3)


def test_space_saving_error_is_subtracted() -> None:
    est = RateEstimator(60.0)
    report = traffic("r1", 0, {"a": 100}, total=100)
    report.top_keys[0].error = 40
    est.observe(report)
    assert rates_by_key(est)["a"] == pytest.approx(6.0, rel=1e-3)


def test_a_key_that_stops_decays_with_the_half_life() -> None:
    est = RateEstimator(10.0)
    for window in range(100):  # 1000 s of a at 10/s
        est.observe(traffic("r1", window, {"a": 100}, total=100))
    before = rates_by_key(est)["a"]
    for window in range(100, 102):  # 20 s (two half-lives) without a
        est.observe(traffic("r1", window, {}, total=0))
    assert rates_by_key(est)["a"] == pytest.approx(before / 4, rel=1e-6)


def test_rates_follow_a_rate_change_within_a_few_half_lives() -> None:
    est = RateEstimator(10.0)
    for window in range(50):
        est.observe(traffic("r1", window, {"a": 10}, total=10, window_s=1))
    for window in range(50, 100):
        est.observe(traffic("r1", window, {"a": 50}, total=50, window_s=1))
    assert rates_by_key(est)["a"] == pytest.approx(50, rel=0.05)


def test_reports_with_a_bad_window_are_ignored() -> None:
    est = RateEstimator(60.0)
    assert not est.observe(cluster_pb2.TrafficReport(total_requests=5))
    backwards = traffic("r", 0, {"a": 1}, total=1)
    backwards.window_start_unix_ms = backwards.window_end_unix_ms + 1
    assert not est.observe(backwards)
    assert est.reports == 0 and est.snapshot().total_rate == 0


def test_state_round_trips_and_a_new_half_life_keeps_todays_rates() -> None:
    est = RateEstimator(60.0)
    for window in range(5):
        est.observe(traffic("r1", window, {"a": 300, "é-key": 20}, total=1000))
    est.cursor = "1700000000000-3"
    data = est.to_bytes()
    same = RateEstimator.from_bytes(data, 60.0, max_keys=10)
    assert rates_by_key(same) == rates_by_key(est)
    assert same.cursor == est.cursor and same.reports == 5
    rescaled = RateEstimator.from_bytes(data, 5.0, max_keys=10)
    for key, rate in rates_by_key(est).items():
        assert rates_by_key(rescaled)[key] == pytest.approx(rate, rel=1e-9)
    with pytest.raises(RateStateError):
        RateEstimator.from_bytes(b"garbage", 60.0, max_keys=10)


def test_prune_forgets_dead_keys_and_keeps_the_highest() -> None:
    est = RateEstimator(1.0, max_keys=2)
    est.observe(traffic("r1", 0, {"a": 50, "b": 40, "c": 30}, total=120, window_s=1))
    assert est.prune() == 1
    assert set(rates_by_key(est)) == {"a", "b"}
    for window in range(1, 40):  # 39 half-lives of silence
        est.observe(traffic("r1", window, {}, total=0, window_s=1))
    assert est.prune() == 2 and est.num_keys == 0


def test_epoch_rebase_keeps_rates_over_long_runs() -> None:
    est = RateEstimator(1.0)
    for window in range(300):  # 300 half-lives: forces rebasing
        est.observe(traffic("r1", window, {"a": 7}, total=7, window_s=1))
    assert math.isfinite(rates_by_key(est)["a"])
    assert rates_by_key(est)["a"] == pytest.approx(7, rel=1e-3)


@pytest.mark.redis
async def test_tracker_folds_the_stream_saves_state_and_resumes_without_double_counting(
    stores: Stores,
) -> None:
    await stores.plans.add_pool("default")
    for window in range(2):
        for router in ("r1", "r2"):
            await stores.telemetry.add_traffic(traffic(router, window, {"a": 100}, total=200))
    tracker = RateTracker(stores, ControlPlaneMetrics(), 60.0, 1000)
    await tracker.update(term=1)
    saved = await load_estimator(stores, "default", 60.0, 1000)
    assert saved.reports == 4
    assert rates_by_key(saved)["a"] == pytest.approx(20, rel=1e-3)

    await stores.telemetry.add_traffic(traffic("r1", 2, {"a": 100}, total=200))
    live = await current_rates(stores, "default", 60.0, 1000)  # any instance, no write
    assert (await load_estimator(stores, "default", 60.0, 1000)).reports == 4
    assert live.total_rate > 0 and int(live.key_hashes[0]) == hash_key("a")

    restarted = RateTracker(stores, ControlPlaneMetrics(), 60.0, 1000)  # a new leader
    await restarted.update(term=1)
    await restarted.update(term=1)
    assert (await load_estimator(stores, "default", 60.0, 1000)).reports == 5


def sized(report: cluster_pb2.TrafficReport, sizes: dict[str, tuple[float, int]]) -> None:
    for kc in report.top_keys:
        if kc.key in sizes:
            kc.reusable_prefix_blocks, kc.prefix_samples = sizes[kc.key]


def test_reported_prefix_sizes_are_sample_weighted_across_routers_and_saved() -> None:
    est = RateEstimator(60.0, max_keys=10)
    one = traffic("r1", 0, {"a": 30, "b": 5, "c": 5}, total=40)
    sized(one, {"a": (100.0, 3), "b": (0.0, 1)})
    two = traffic("r2", 0, {"a": 30}, total=30)
    sized(two, {"a": (20.0, 1)})
    est.observe(one)
    est.observe(two)
    got = {est.snapshot().labels[h]: s for h, s in est.snapshot().prefix_blocks.items()}
    assert got == pytest.approx({"a": (3 * 100 + 20) / 4, "b": 0.0})  # c: never sampled
    again = RateEstimator.from_bytes(est.to_bytes(), 60.0, max_keys=10)
    assert again.snapshot().prefix_blocks == pytest.approx(est.snapshot().prefix_blocks)
    for window in range(1, 200):  # 100 half-lives: rebases and prunes keep the means
        est.observe(traffic("r1", window, {"a": 30}, total=30, window_s=30))
        est.prune()
    assert set(est.snapshot().prefix_blocks) == {hash_key("a")}
    assert est.snapshot().prefix_blocks[hash_key("a")] == pytest.approx(80.0)


def test_a_state_saved_before_sizes_were_reported_still_loads() -> None:
    est = RateEstimator(60.0)
    est.observe(traffic("r1", 0, {"a": 30}, total=30))
    data = est.to_bytes()
    head_len = int.from_bytes(data[4:8], "little")
    header = json.loads(data[8 : 8 + head_len])
    del header["sized"]
    head = json.dumps(header, sort_keys=True).encode()
    old = data[:4] + len(head).to_bytes(4, "little") + head + data[8 + head_len :]
    loaded = RateEstimator.from_bytes(old, 60.0, max_keys=10)
    assert rates_by_key(loaded) == rates_by_key(est) and loaded.snapshot().prefix_blocks == {}
