"""The routers' TTFT reaches the live guard and the fleet windows when the engines export none.

Real parts end to end but the HTTP hop: the router's per-node counts (:mod:`dataplane.telemetry.
node_ttft`, fed the way the front's answer timer feeds them), its real traffic reporter writing to
the state twin, the leader's rate tracker reading the stream, the TTFT windows, the live guard's
p99, the pool status and the fleet-window recorder. The real-binary version (llama.cpp agents,
routers and a control plane as processes) is tests/agents/test_llamacpp_real.py.
"""

from __future__ import annotations

import pytest

from cachectl.status_cmd import auto_lines
from cacheroute.v1 import admin_pb2, agent_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.fleet_windows import FleetWindowRecorder
from controlplane.cluster.key_rate_tracker import RateTracker
from controlplane.cluster.loads import feed_ttft
from controlplane.core.ttft_window import Buckets, TtftWindows
from controlplane.lifecycle.live_guard import GuardSettings, LiveGuard
from controlplane.metrics import ControlPlaneMetrics
from dataplane.core.heavy_hitters import TrafficCounter
from dataplane.core.keys import hash_key
from dataplane.telemetry.node_ttft import NodeTtftCounts
from dataplane.telemetry.traffic import TrafficReporter

POOL = "default"


async def _route_and_report(
    stores: Stores, counts: NodeTtftCounts, requests: int, router_id: str = "r1"
) -> None:
    """``requests`` answers of 0.3 s on n1 and 0.6 s on n2, then one traffic report."""
    counter = TrafficCounter(64)
    for i in range(requests):
        counter.add(hash_key(f"k{i % 4}"), f"k{i % 4}")
        counts.observe(POOL, "n1" if i % 2 else "n2", 0.3 if i % 2 else 0.6)
    reporter = TrafficReporter(
        stores.telemetry,
        lambda: [(POOL, counter)],
        router_id=router_id,
        interval_s=1.0,
        on_dropped=lambda n: None,
        node_ttft=counts,
    )
    await reporter.flush()
    assert reporter.sent == 1


async def test_router_measured_ttft_feeds_the_guard_status_and_fleet_windows(
    memory_stores: Stores,
) -> None:
    stores = memory_stores
    await stores.plans.add_pool(POOL)
    now = [1_000]
    windows = TtftWindows(retention_ms=300_000)
    tracker = RateTracker(
        stores, ControlPlaneMetrics(), 60.0, 1000, ttft=windows, clock_ms=lambda: now[0]
    )
    recorder = FleetWindowRecorder(stores, windows, window_ms=60_000, min_samples=100)
    guard = LiveGuard(stores, windows, GuardSettings(window_s=60.0), ControlPlaneMetrics())
    counts = NodeTtftCounts()
    assert await recorder.tick_all(now[0]) == []  # opens the window
    for step in range(1, 7):
        now[0] = 1_000 + step * 10_000
        await _route_and_report(stores, counts, 40)
        await tracker.update(term=1)
    p99 = guard.pool_p99(POOL, now[0])
    assert p99.samples == 240 and p99.nodes == 2 and p99.source == "routers"
    await tracker.update(term=1)  # a report read once counts once
    assert guard.pool_p99(POOL, now[0]).samples == 240
    assert p99.value_s is not None and 0.5 < p99.value_s <= 0.75
    (window,) = await recorder.tick_all(now[0])
    assert window.samples == 240 and window.nodes == 2
    assert 0.2 < window.ttft_p50_s <= 0.75 and window.qps == 240 / 60


async def test_an_engine_histogram_wins_over_the_routers_for_its_node() -> None:
    windows = TtftWindows()
    bounds = (0.1, 1.0)
    for at, total in ((1_000, 0.0), (2_000, 10.0)):
        windows.observe(POOL, "n1", at, Buckets(bounds, (total, total), total))  # engine
    for node in ("n1", "n2"):
        windows.add(POOL, node, 2_000, Buckets(bounds, (0.0, 10.0), 10.0), "router:r1")
    got = windows.quantile(POOL, 0.5, 0, 3_000)
    assert got.samples == 20 and got.nodes == 2  # n1 once (its engine's), n2 from the router
    assert got.source == "engines and routers"
    assert windows.quantile(POOL, 0.5, 5_000, 6_000).source == ""


async def test_a_removed_nodes_router_readings_are_forgotten_a_registered_ones_kept() -> None:
    windows = TtftWindows()
    bounds = (0.1, 1.0)
    for node in ("static", "gone"):
        windows.add(POOL, node, 2_000, Buckets(bounds, (5.0, 5.0), 5.0), "router:r")
    reports: dict[str, ReportRecord] = {}
    feed_ttft(windows, POOL, reports, registered=["static"])
    got = windows.quantile(POOL, 0.5, 0, 3_000)
    assert got.samples == 5 and got.nodes == 1


def test_node_counts_are_histograms_since_the_last_take_in_the_front_metrics_bounds() -> None:
    counts = NodeTtftCounts()
    for seconds in (0.004, 0.005, 0.3, 500.0):
        counts.observe(POOL, "n1", seconds)
    counts.observe(POOL, "", 0.1)  # no node known (a door that does not say): not counted
    counts.observe("other", "n9", 0.1)
    assert counts.pending(POOL)
    (reading,) = counts.take(POOL)
    assert not counts.pending(POOL) and counts.take(POOL) == []
    assert counts.pending("other")
    h: agent_pb2.LatencyHistogram = reading.ttft
    assert reading.node_id == "n1" and h.count == 4 and h.sum == pytest.approx(500.309)
    assert h.counts[0] == 2  # le 0.005: both
    assert h.counts[list(h.upper_bounds).index(0.3)] == 3
    assert h.counts[-1] == 3  # 500 s only in +Inf
    assert list(h.counts) == sorted(h.counts)


def test_status_says_who_measured_the_p99() -> None:
    pool = admin_pb2.PoolStatus(pool=POOL, p99_ttft_s=0.5, ttft_samples=240, ttft_source="routers")
    (line,) = [x for x in auto_lines(pool) if x.startswith("p99 TTFT")]
    assert line.endswith("over 240 requests (measured by the routers: the engines export no TTFT)")
    pool.ttft_source = "engines"
    (line,) = [x for x in auto_lines(pool) if x.startswith("p99 TTFT")]
    assert line.endswith("(as the engines report it)")


async def test_answers_timed_after_the_last_routed_window_still_get_reported(
    memory_stores: Stores,
) -> None:
    counter = TrafficCounter(64)
    counts = NodeTtftCounts()
    reporter = TrafficReporter(
        memory_stores.telemetry, lambda: [(POOL, counter)], router_id="r1", interval_s=1.0,
        on_dropped=lambda n: None, node_ttft=counts,
    )  # fmt: skip
    await reporter.flush()
    assert reporter.sent == 0  # nothing routed, nothing timed: no report
    counts.observe(POOL, "n1", 0.2)  # the answer of a request routed in an earlier window
    await reporter.flush()
    _, (report,) = await memory_stores.telemetry.read_traffic(POOL, "0")
    assert report.total_requests == 0 and not report.top_keys
    assert [(e.node_id, e.ttft.count) for e in report.node_ttft] == [("n1", 1.0)]
