"""The state contract: every test runs against the in-memory twin and a real redis-server
(``stores`` in ``conftest.py``)."""

from __future__ import annotations

import asyncio

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import (
    ConflictError,
    Hint,
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


async def test_hints_arrive_for_pointer_moves_loads_and_pools(stores: Stores) -> None:
    received: list[Hint] = []
    ready = asyncio.Event()

    async def listen() -> None:
        async for hint in stores.hints.subscribe(None):
            if hint.kind == "resync":
                ready.set()
                continue
            received.append(hint)
            if len(received) == 3:
                return

    task = asyncio.create_task(listen())
    await asyncio.wait_for(ready.wait(), timeout=5)
    version = await store_plan(stores, 1, pool="blue")
    await stores.plans.move_active("blue", version, expected_generation=0, actor="a", action="x")
    await stores.cluster.publish_load(cluster_pb2.LoadSnapshot(pool="blue", seq=7))
    await asyncio.wait_for(task, timeout=5)
    assert [(h.kind, h.pool) for h in received] == [
        ("pools", ""),
        ("table", "blue"),
        ("load", "blue"),
    ]
    assert received[1].payload == b"1"
    assert cluster_pb2.LoadSnapshot.FromString(received[2].payload).seq == 7


async def test_nodes_acks_and_load(stores: Stores) -> None:
    await stores.cluster.put_node(cluster_pb2.NodeRecord(node_id="b", pool="p", address="h:2"))
    await stores.cluster.put_node(cluster_pb2.NodeRecord(node_id="a", pool="p", address="h:1"))
    assert [n.node_id for n in await stores.cluster.get_nodes("p")] == ["a", "b"]
    assert await stores.cluster.remove_node("p", "a")
    assert not await stores.cluster.remove_node("p", "a")
    assert [n.node_id for n in await stores.cluster.get_nodes("p")] == ["b"]

    await stores.cluster.put_ack(cluster_pb2.RouterAck(router_id="r1", pool="p", generation=3))
    await stores.cluster.put_ack(cluster_pb2.RouterAck(router_id="r1", pool="p", generation=4))
    acks = await stores.cluster.get_acks("p")
    assert [(a.router_id, a.generation) for a in acks] == [("r1", 4)]

    assert await stores.cluster.get_load("p") is None
    await stores.cluster.publish_load(cluster_pb2.LoadSnapshot(pool="p", seq=9))
    load = await stores.cluster.get_load("p")
    assert load is not None
    assert load.seq == 9


async def test_traffic_stream_reads_after_a_cursor(stores: Stores) -> None:
    for total in (10, 20, 30):
        await stores.telemetry.add_traffic(
            cluster_pb2.TrafficReport(router_id="r", pool="p", total_requests=total)
        )
    cursor, reports = await stores.telemetry.read_traffic("p", "0", count=2)
    assert [r.total_requests for r in reports] == [10, 20]
    cursor, reports = await stores.telemetry.read_traffic("p", cursor)
    assert [r.total_requests for r in reports] == [30]
    assert await stores.telemetry.read_traffic("p", cursor) == (cursor, [])


async def test_samples_and_rates(stores: Stores) -> None:
    await stores.telemetry.add_samples(
        [cluster_pb2.SampledRequest(pool="p", key=f"k{i}") for i in range(5)]
    )
    assert [s.key for s in await stores.telemetry.read_samples("p", 3)] == ["k2", "k3", "k4"]
    assert await stores.telemetry.load_rates("p") is None
    await stores.telemetry.save_rates("p", b"state")
    assert await stores.telemetry.load_rates("p") == b"state"


async def test_lease_has_one_holder_and_expires(stores: Stores) -> None:
    assert await stores.leases.acquire_or_renew("leader", "cp-1", 300)
    assert not await stores.leases.acquire_or_renew("leader", "cp-2", 300)
    assert await stores.leases.acquire_or_renew("leader", "cp-1", 300)
    assert await stores.leases.holder("leader") == "cp-1"
    await asyncio.sleep(0.4)
    assert await stores.leases.acquire_or_renew("leader", "cp-2", 300)
    await stores.leases.release("leader", "cp-1")  # not the holder: no effect
    assert await stores.leases.holder("leader") == "cp-2"
    await stores.leases.release("leader", "cp-2")
    assert await stores.leases.holder("leader") is None


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


async def test_subscription_to_some_pools_hears_only_them_and_pool_additions(
    stores: Stores,
) -> None:
    received: list[Hint] = []
    ready = asyncio.Event()

    async def listen() -> None:
        async for hint in stores.hints.subscribe(["blue"]):
            if hint.kind == "resync":
                ready.set()
                continue
            received.append(hint)
            if hint.kind == "load":
                return

    task = asyncio.create_task(listen())
    await asyncio.wait_for(ready.wait(), timeout=5)
    await stores.cluster.publish_load(cluster_pb2.LoadSnapshot(pool="green", seq=1))
    await stores.plans.add_pool("red")
    await stores.cluster.publish_load(cluster_pb2.LoadSnapshot(pool="blue", seq=2))
    await asyncio.wait_for(task, timeout=5)
    assert [(h.kind, h.pool, h.payload[:3]) for h in received[:1]] == [("pools", "", b"red")]
    assert [(h.kind, h.pool) for h in received] == [("pools", ""), ("load", "blue")]


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
