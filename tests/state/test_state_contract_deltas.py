"""Table deltas in the state contract: stored with their target plan, gone with it."""

from __future__ import annotations

from cacheroute_state import Stores
from tests.support.factories import store_plan


async def test_a_delta_is_read_back_by_base_and_target(stores: Stores) -> None:
    v1, v2 = [await store_plan(stores, s) for s in (1, 2)]
    assert await stores.plans.get_delta_bytes("default", v1, v2) is None
    await stores.plans.put_delta("default", v1, v2, b"delta 1->2")
    assert await stores.plans.get_delta_bytes("default", v1, v2) == b"delta 1->2"
    assert await stores.plans.get_delta_bytes("default", v2, v1) is None  # direction matters
    assert await stores.plans.get_delta_bytes("other", v1, v2) is None


async def test_deleting_the_target_plan_deletes_its_deltas(stores: Stores) -> None:
    v1, v2 = [await store_plan(stores, s) for s in (1, 2)]
    await stores.plans.put_delta("default", v1, v2, b"delta 1->2")
    assert await stores.plans.delete_plan("default", v2)
    assert await stores.plans.get_delta_bytes("default", v1, v2) is None
