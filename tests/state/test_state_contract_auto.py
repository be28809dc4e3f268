"""The state contract of the automatic-mode and live-guard records (twin and real Redis)."""

from __future__ import annotations

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores


async def test_auto_mode_is_absent_until_set_and_then_replaced_per_pool(stores: Stores) -> None:
    assert await stores.plans.get_auto_mode("a") is None
    on = cluster_pb2.AutoMode(pool="a", enabled=True, actor="alice", updated_at_unix_ms=5)
    await stores.plans.put_auto_mode(on)
    assert await stores.plans.get_auto_mode("a") == on
    assert await stores.plans.get_auto_mode("b") is None
    off = cluster_pb2.AutoMode(pool="a", enabled=False, actor="bob", updated_at_unix_ms=6)
    await stores.plans.put_auto_mode(off)
    assert await stores.plans.get_auto_mode("a") == off


async def test_guard_state_round_trips_per_pool(stores: Stores) -> None:
    assert await stores.plans.get_guard("a") is None
    state = cluster_pb2.GuardState(
        pool="a", phase=cluster_pb2.GuardState.PHASE_FIRED, version="p1", before_p99_s=0.2,
        after_p99_s=0.9, action="disable",
    )  # fmt: skip
    await stores.plans.put_guard(state)
    assert await stores.plans.get_guard("a") == state
    assert await stores.plans.get_guard("b") is None
