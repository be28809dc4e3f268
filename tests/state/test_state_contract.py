"""The state contract of the plan store: put, list, fetch, update and delete plans, and the reads
of an empty store. Every test runs against the in-memory twin and a real redis-server (``stores``
in ``conftest.py``); the active pointer is in test_state_pointer.py, the cluster state in
test_state_cluster.py."""

from __future__ import annotations

import pytest

from cacheroute_state import Stores
from cacheroute_state.interfaces import (
    PlanInUseError,
    PlanMismatchError,
    PlanNotFoundError,
)
from dataplane.core.table_codec import decode_table, encode_table
from tests.support.factories import metadata_for, small_plan, store_plan


async def test_put_plan_stores_bytes_and_metadata_once(stores: Stores) -> None:
    table = small_plan()
    meta, created = await stores.plans.put_plan(encode_table(table), metadata_for(table))
    assert created
    again, created_again = await stores.plans.put_plan(encode_table(table), metadata_for(table))
    assert not created_again
    assert again == meta
    stored = await stores.plans.get_table_bytes("default", table.version)
    assert stored is not None
    assert decode_table(stored).content_hash == table.content_hash
    assert await stores.plans.pools() == ["default"]


async def test_put_plan_rejects_same_version_with_other_content(stores: Stores) -> None:
    table = small_plan()
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    forged = metadata_for(table)
    forged.content_hash = "0" * 64
    with pytest.raises(PlanMismatchError):
        await stores.plans.put_plan(encode_table(table), forged)


async def test_list_plans_newest_first(stores: Stores) -> None:
    tables = [small_plan(seed=s) for s in range(3)]
    for i, table in enumerate(tables):
        meta = metadata_for(table)
        meta.created_at_unix_ms = 1000 + i
        await stores.plans.put_plan(encode_table(table), meta)
    listed = await stores.plans.list_plans("default", 10)
    assert [m.version for m in listed] == [t.version for t in reversed(tables)]
    assert len(await stores.plans.list_plans("default", 2)) == 2


async def test_update_metadata_of_a_missing_plan_is_not_found(stores: Stores) -> None:
    table = small_plan()
    with pytest.raises(PlanNotFoundError):
        await stores.plans.update_metadata(metadata_for(table))
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    meta = metadata_for(table)
    meta.note = "reviewed"
    await stores.plans.update_metadata(meta)
    stored = await stores.plans.get_metadata("default", table.version)
    assert stored is not None and stored.note == "reviewed"


async def test_list_and_history_limits_of_zero_read_everything(stores: Stores) -> None:
    versions = [await store_plan(stores, s) for s in range(3)]
    assert len(await stores.plans.list_plans("default", 0)) == 3
    for generation, version in enumerate(versions):
        await stores.plans.move_active(
            "default", version, expected_generation=generation, actor="a", action="rollout"
        )
    assert await stores.plans.previous_versions("default", 0) == versions[1::-1]
    assert await stores.plans.previous_versions("default", 1) == [versions[1]]


async def test_reads_of_an_empty_store(stores: Stores) -> None:
    assert await stores.plans.get_active("p") is None
    assert await stores.plans.get_table_bytes("p", "p0000000000000000") is None
    assert await stores.plans.list_plans("p", 10) == []
    assert await stores.plans.read_audit("p", 10) == []
    assert await stores.plans.pools() == []
    assert await stores.cluster.get_reports("p") == {}
    assert await stores.telemetry.read_traffic("p", "0") == ("0", [])
    assert await stores.telemetry.read_samples("p", 10) == []
    assert await stores.leases.holder("leader") is None


async def test_fetch_table_reads_the_stored_bytes(stores: Stores) -> None:
    table = small_plan()
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    fetched = await stores.fetch_table("default", table.version)
    assert fetched is not None and bytes(fetched) == encode_table(table)
    assert await stores.fetch_table("default", "p0000000000000000") is None


async def test_delete_plan_removes_it_but_never_the_active_one_or_the_rollback_target(
    stores: Stores,
) -> None:
    v1, v2, v3, v4 = [await store_plan(stores, s) for s in (1, 2, 3, 4)]
    for generation, version in enumerate((v1, v2, v3)):
        await stores.plans.move_active(
            "default", version, expected_generation=generation, actor="a", action="rollout"
        )
    # active v3; previous [v2, v1]: v2 is the rollback target
    for protected in (v3, v2):
        with pytest.raises(PlanInUseError):
            await stores.plans.delete_plan("default", protected)
    assert await stores.plans.delete_plan("default", v1)  # older history may go
    assert await stores.plans.delete_plan("default", v4)  # never active
    assert not await stores.plans.delete_plan("default", v4)  # already gone
    assert await stores.plans.get_metadata("default", v4) is None
    assert await stores.plans.get_table_bytes("default", v4) is None
    assert [m.version for m in await stores.plans.list_plans("default", 10)] == [v3, v2]
    with pytest.raises(PlanNotFoundError):  # a deleted version cannot become active
        await stores.plans.move_active(
            "default", v1, expected_generation=3, actor="a", action="rollback"
        )
    await stores.plans.move_active(
        "default", "", expected_generation=3, actor="a", action="disable"
    )
    with pytest.raises(PlanInUseError):  # disabled: v3 is now the rollback target
        await stores.plans.delete_plan("default", v3)
    assert await stores.plans.delete_plan("default", v2)
