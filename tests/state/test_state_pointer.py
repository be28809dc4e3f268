"""The state contract of the active pointer: generations, compare-and-set, history, disabling.
Every test runs against the in-memory twin and a real redis-server (``stores`` in
``conftest.py``)."""

from __future__ import annotations

import asyncio

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import (
    ConflictError,
    PlanNotFoundError,
)
from tests.support.factories import store_plan


async def test_move_active_increments_generation_and_records_history(stores: Stores) -> None:
    v1, v2 = await store_plan(stores, 1), await store_plan(stores, 2)
    first = await stores.plans.move_active(
        "default", v1, expected_generation=0, actor="alice", action="rollout"
    )
    second = await stores.plans.move_active(
        "default", v2, expected_generation=1, actor="bob", action="rollout"
    )
    back = await stores.plans.move_active(
        "default", v1, expected_generation=2, actor="bob", action="rollback"
    )
    assert (first.generation, second.generation, back.generation) == (1, 2, 3)
    active = await stores.plans.get_active("default")
    assert active is not None
    assert (active.version, active.generation, active.action) == (v1, 3, "rollback")
    assert await stores.plans.previous_versions("default") == [v2, v1]
    audit = await stores.plans.read_audit("default", 10)
    assert [(e.action, e.to_version, e.generation) for e in audit] == [
        ("rollout", v1, 1),
        ("rollout", v2, 2),
        ("rollback", v1, 3),
    ]
    assert audit[1].from_version == v1


async def test_an_empty_version_disables_without_a_plan_and_stays_out_of_history(
    stores: Stores,
) -> None:
    v1 = await store_plan(stores, 1)
    await stores.plans.move_active(
        "default", v1, expected_generation=0, actor="alice", action="rollout"
    )
    off = await stores.plans.move_active(
        "default", "", expected_generation=1, actor="bob", action="disable"
    )
    assert (off.version, off.generation, off.action) == ("", 2, "disable")
    again = await stores.plans.move_active(
        "default", v1, expected_generation=2, actor="bob", action="rollback"
    )
    assert again.generation == 3
    assert await stores.plans.previous_versions("default") == [v1]  # "" is never history


async def test_move_active_is_compare_and_set(stores: Stores) -> None:
    v1, v2 = await store_plan(stores, 1), await store_plan(stores, 2)
    await stores.plans.move_active(
        "default", v1, expected_generation=0, actor="a", action="rollout"
    )
    with pytest.raises(ConflictError) as raised:
        await stores.plans.move_active(
            "default", v2, expected_generation=0, actor="b", action="rollout"
        )
    assert raised.value.current is not None
    assert raised.value.current.version == v1
    active = await stores.plans.get_active("default")
    assert active is not None
    assert (active.version, active.generation) == (v1, 1)


async def test_concurrent_moves_exactly_one_wins(stores: Stores) -> None:
    versions = [await store_plan(stores, s) for s in range(4)]
    results = await asyncio.gather(
        *(
            stores.plans.move_active(
                "default", v, expected_generation=0, actor=f"op{i}", action="rollout"
            )
            for i, v in enumerate(versions)
        ),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, cluster_pb2.ActivePointer)]
    assert len(winners) == 1
    assert all(isinstance(r, ConflictError) for r in results if r not in winners)


async def test_move_active_to_unknown_version_changes_nothing(stores: Stores) -> None:
    v1 = await store_plan(stores, 1)
    await stores.plans.move_active(
        "default", v1, expected_generation=0, actor="a", action="rollout"
    )
    with pytest.raises(PlanNotFoundError):
        await stores.plans.move_active(
            "default", "p0000000000000000", expected_generation=1, actor="a", action="rollout"
        )
    active = await stores.plans.get_active("default")
    assert active is not None
    assert (active.version, active.generation) == (v1, 1)
