"""Rollouts move bytes in proportion to what changed: a router fetches the delta against the
version it holds (real Redis, the control plane's own rollout path, the router's table watcher),
and still converges to the exact table when it missed versions or a delta is bad."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from cacheroute_state import Stores
from controlplane.lifecycle.pointer_moves import activate
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable
from dataplane.sync.table_watcher import TableWatcher
from dataplane.telemetry.router_metrics import RouterMetrics
from tests.support.factories import store_plan
from tests.support.scripts import load_script

pytestmark = [pytest.mark.redis]
scale = load_script("bench/scale_fixtures.py")


def fetched(metrics: RouterMetrics, kind: str) -> float:
    value = metrics.registry.get_sample_value(
        "cacheroute_router_table_bytes_fetched_total", {"pool": "default", "kind": kind}
    )
    return value or 0.0


def held(router: Router) -> RoutingTable:
    table = router.pools["default"].table
    assert table is not None
    return table


def assert_exact(got: RoutingTable, want: RoutingTable) -> None:
    assert got.version == want.version and got.node_ids == want.node_ids
    assert np.array_equal(got.key_hashes, want.key_hashes)
    assert np.array_equal(got.set_offsets, want.set_offsets)
    assert np.array_equal(got.set_members, want.set_members)


class Watched(TableWatcher):
    """A table watcher that keeps its router and metrics at hand for the assertions."""

    def __init__(self, stores: Stores) -> None:
        self.router, self.metrics = Router(), RouterMetrics("cacheroute")
        super().__init__(
            self.router, stores.plans, stores.cluster, self.metrics,
            router_id="r1", listen_address="127.0.0.1:1", fetch=stores.fetch_table,
        )  # fmt: skip


@pytest.fixture
async def watcher(stores: Stores) -> AsyncIterator[Watched]:
    watcher = Watched(stores)
    yield watcher
    watcher.close()


async def roll(stores: Stores, table: RoutingTable) -> None:
    version = await store_plan(stores, table)
    await activate(stores, "default", version, None, actor="test", action="rollout", reason="")


def keys(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.unique(rng.integers(1, 2**63, count, dtype=np.uint64))


async def test_a_5_percent_change_of_a_1m_key_plan_fetches_under_a_fifth_of_its_bytes(
    stores: Stores, watcher: Watched
) -> None:
    first = scale.table_for(keys(1_000_000, 1), 1000, seed=1)
    second = scale.changed(first, 0.05, seed=2)
    metrics = watcher.metrics
    await roll(stores, first)
    await watcher.sync()
    full_first = fetched(metrics, "full")
    assert full_first > 10_000_000  # the first table comes whole
    await roll(stores, second)
    await watcher.sync()
    delta = fetched(metrics, "delta")
    whole = await stores.plans.get_table_bytes("default", second.version)
    assert whole is not None
    assert fetched(metrics, "full") == full_first  # nothing fetched whole the second time
    assert 0 < delta <= 0.2 * len(whole), (delta, len(whole))
    assert_exact(held(watcher.router), second)


async def test_a_router_that_missed_versions_converges_to_the_exact_table(
    stores: Stores, watcher: Watched
) -> None:
    tables = [scale.table_for(keys(20_000, 3), 50, seed=10)]
    for step in range(1, 6):
        tables.append(scale.changed(tables[-1], 0.05, seed=10 + step))
    metrics = watcher.metrics
    await roll(stores, tables[0])
    await watcher.sync()
    await roll(stores, tables[1])
    await roll(stores, tables[2])  # the router missed 1: the delta from 0 (previous) serves it
    await watcher.sync()
    assert_exact(held(watcher.router), tables[2])
    assert fetched(metrics, "delta") > 0
    full = fetched(metrics, "full")
    for table in tables[3:]:  # missed 3 and 4: no delta from 2 to 5 is stored
        await roll(stores, table)
    await watcher.sync()
    assert_exact(held(watcher.router), tables[5])
    assert fetched(metrics, "full") > full  # fetched whole, as before deltas


async def test_a_bad_delta_is_rejected_and_the_whole_table_fetched(
    stores: Stores, watcher: Watched
) -> None:
    first = scale.table_for(keys(20_000, 4), 50, seed=20)
    second = scale.changed(first, 0.05, seed=21)
    await roll(stores, first)
    await watcher.sync()
    version = await store_plan(stores, second)
    await stores.plans.put_delta("default", first.version, version, b"\x1a\x03not a delta")
    await activate(stores, "default", version, None, actor="test", action="rollout", reason="")
    await watcher.sync()
    assert fetched(watcher.metrics, "delta_rejected") > 0
    assert_exact(held(watcher.router), second)
