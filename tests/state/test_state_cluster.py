"""The state contract of the cluster state: hints and subscriptions, nodes, ACKs and loads, traffic
and samples, the leader lease. Every test runs against the in-memory twin and a real redis-server
(``stores`` in ``conftest.py``)."""

from __future__ import annotations

import asyncio

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import (
    Hint,
)
from tests.support.factories import store_plan


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
