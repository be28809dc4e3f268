"""The leader's Flat-LB window recorder: a window per pool only while no plan is active, with
the pool's merged TTFT quantiles and the rate its engines served (state twin)."""

from __future__ import annotations

from cacheroute_state import Stores
from controlplane.cluster.fleet_windows import FleetWindowRecorder
from controlplane.core.ttft_window import Buckets, TtftWindows
from dataplane.core.table_codec import encode_table
from tests.support.factories import metadata_for, small_plan

BOUNDS = (0.1, 0.2, 0.4, 0.8)


def reading(total: float) -> Buckets:
    """A cumulative histogram: 40% under 0.1 s, 40% in (0.1, 0.2], 20% in (0.2, 0.4]."""
    return Buckets(BOUNDS, (0.4 * total, 0.8 * total, total, total), total)


def feed(ttft: TtftWindows, pool: str, at_ms: int, total: float) -> None:
    for node in ("n1", "n2"):
        ttft.observe(pool, node, at_ms, reading(total))


async def test_a_flat_lb_window_records_the_rate_served_and_the_merged_quantiles(
    memory_stores: Stores,
) -> None:
    stores = memory_stores
    await stores.plans.add_pool("default")
    ttft = TtftWindows(retention_ms=300_000)
    recorder = FleetWindowRecorder(stores, ttft, window_ms=60_000, keep=3)
    feed(ttft, "default", 1_000, 0.0)
    assert await recorder.tick_all(1_000) == []  # opens the window
    feed(ttft, "default", 30_000, 300.0)
    assert await recorder.tick_all(30_000) == []
    feed(ttft, "default", 61_000, 600.0)  # 2 nodes x 600 first tokens in 60 s
    (window,) = await recorder.tick_all(61_000)
    assert window.qps == 20.0 and window.samples == 1200 and window.nodes == 2
    assert 0.1 < window.ttft_p50_s <= 0.2 and 0.2 < window.ttft_p99_s <= 0.4
    assert await stores.telemetry.read_fleet_windows("default") == [window]


async def test_no_window_while_a_plan_is_active_and_a_generation_change_restarts_it(
    memory_stores: Stores,
) -> None:
    stores = memory_stores
    table = small_plan(seed=1)
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    ttft = TtftWindows(retention_ms=300_000)
    recorder = FleetWindowRecorder(stores, ttft, window_ms=60_000)
    await stores.plans.move_active(
        table.pool, table.version, expected_generation=0, actor="a", action="rollout"
    )
    for t, total in ((1_000, 0.0), (61_000, 600.0), (121_000, 1200.0)):
        feed(ttft, table.pool, t, total)
        assert await recorder.tick(table.pool, t) is None  # planned routing
    await stores.plans.move_active(
        table.pool, "", expected_generation=1, actor="a", action="disable"
    )
    assert await recorder.tick(table.pool, 122_000) is None  # Flat-LB from here
    await stores.plans.move_active(  # rolled out and disabled again between two ticks
        table.pool, table.version, expected_generation=2, actor="a", action="rollout"
    )
    await stores.plans.move_active(
        table.pool, "", expected_generation=3, actor="a", action="disable"
    )
    feed(ttft, table.pool, 182_000, 1800.0)
    assert await recorder.tick(table.pool, 182_000) is None  # restarted, not closed
    feed(ttft, table.pool, 242_000, 2400.0)
    window = await recorder.tick(table.pool, 242_000)
    assert window is not None and window.start_unix_ms == 182_000
    assert await stores.telemetry.read_fleet_windows(table.pool) == [window]


async def test_a_window_with_too_few_observations_is_dropped(memory_stores: Stores) -> None:
    stores = memory_stores
    await stores.plans.add_pool("default")
    ttft = TtftWindows(retention_ms=300_000)
    recorder = FleetWindowRecorder(stores, ttft, window_ms=60_000, min_samples=100)
    feed(ttft, "default", 1_000, 0.0)
    await recorder.tick("default", 1_000)
    feed(ttft, "default", 61_000, 20.0)  # 40 observations
    assert await recorder.tick("default", 61_000) is None
    assert await stores.telemetry.read_fleet_windows("default") == []
