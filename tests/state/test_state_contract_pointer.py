"""The active pointer's damage and repair, against the twin and a real Redis (issue 23, failure
6; and issue 21: the version a move replaced is read inside the move, and the conflict message is
built once, by the store)."""

from __future__ import annotations

from cacheroute_state import Stores, memory, schema
from cacheroute_state.active_pointer import (
    CORRUPT_ACTION,
    active_or_damage,
    generation_to_expect,
)
from cacheroute_state.interfaces import ConflictError, CorruptRecordError
from tests.support.factories import store_plan
from tests.support.records import corrupt_pointer

KEY = schema.pool_key("default", "active")


async def test_a_corrupt_pointer_is_named_and_a_move_overwrites_it(
    stores: Stores, state_url: str
) -> None:
    v1, v2 = await store_plan(stores, 1), await store_plan(stores, 2)
    await stores.plans.move_active("default", v1, expected_generation=0, actor="a", action="x")
    corrupt_pointer(state_url)
    try:
        await stores.plans.get_active("default")
        raise AssertionError("a corrupt pointer was read as a pointer")
    except CorruptRecordError as exc:
        assert exc.record == KEY and exc.generation == 1
        assert KEY in str(exc) and "plan disable" in str(exc)
    shown = await active_or_damage(stores.plans, "default")
    assert shown is not None and shown.action == CORRUPT_ACTION and shown.generation == 1
    expected = await generation_to_expect(stores.plans, "default")
    moved = await stores.plans.move_active(
        "default", v2, expected_generation=expected, actor="ops", action="rollout"
    )
    assert moved.generation == 2
    active = await stores.plans.get_active("default")
    assert active is not None and active.version == v2
    audit = await stores.plans.read_audit("default", 10)
    assert [(e.from_version, e.to_version) for e in audit] == [("", v1), (v1, v2)]


async def test_a_conflict_carries_the_stores_own_message(stores: Stores) -> None:
    v1 = await store_plan(stores, 1)
    await stores.plans.move_active("default", v1, expected_generation=0, actor="al", action="x")
    try:
        await stores.plans.move_active("default", v1, expected_generation=5, actor="b", action="y")
        raise AssertionError("a stale generation moved the pointer")
    except ConflictError as exc:
        assert exc.current is not None and exc.current.generation == 1
        assert "is at generation 1" in str(exc) and "not the expected generation 5" in str(exc)
        assert "by al" in str(exc)


async def test_a_pointer_key_of_the_wrong_type_is_corrupt_and_overwritten(
    stores: Stores, state_url: str
) -> None:
    if state_url.startswith(memory.SCHEME):
        return  # the twin has no key types; the Redis script's own branch
    v1 = await store_plan(stores, 1)
    corrupt_pointer(state_url, wrong_type=True)
    shown = await active_or_damage(stores.plans, "default")
    assert shown is not None and shown.action == CORRUPT_ACTION and shown.generation == 0
    moved = await stores.plans.move_active(
        "default", v1, expected_generation=0, actor="ops", action="rollout"
    )
    assert moved.generation == 1
    assert (await stores.plans.get_active("default")) == moved
