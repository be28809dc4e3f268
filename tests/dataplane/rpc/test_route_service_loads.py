"""The router over real gRPC follows loads and pools: snapshots steer warm keys, drained and
unhealthy nodes are avoided, a pool added later becomes routable (on the state twin)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cacheroute.v1 import routing_pb2
from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from tests.support.factories import small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    load_snapshot,
    rollout,
    router_stub,
    running_router,
    scrape,
    warm_keys,
)

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


async def test_load_snapshots_steer_a_warm_key_to_the_least_loaded_member(
    state_url: str, stores: Stores
) -> None:
    table = small_plan(seed=1, q_cap=0.1)  # low q_cap: hot keys get several destinations
    key = next(k for k in warm_keys(table) if len(table.destination_ids(hash_key(k)) or []) > 1)
    members = table.destination_ids(hash_key(key)) or []
    await rollout(stores, await store_plan(stores, table))
    loads = dict.fromkeys(NODES, 50.0)
    await stores.cluster.publish_load(load_snapshot({**loads, members[0]: 0.0}, seq=1))
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        assert (await stub.Route(routing_pb2.RouteRequest(key=key))).node_id == members[0]
        await stores.cluster.publish_load(load_snapshot({**loads, members[1]: 0.0}, seq=2))

        async def moved() -> bool:
            return (await stub.Route(routing_pb2.RouteRequest(key=key))).node_id == members[1]

        await eventually(moved)  # only the pushed snapshot: the poll is 60 s (QUIET)
        metrics = scrape(server)
    line = f'cacheroute_router_node_load{{node="{members[0]}",pool="default"}} '
    shown = next(row for row in metrics.splitlines() if row.startswith(line))
    assert float(shown.split()[-1]) >= 50.0  # the snapshot's load plus in-flight decisions


async def test_drained_and_unhealthy_nodes_are_not_chosen(state_url: str, stores: Stores) -> None:
    table = small_plan(seed=1)
    await rollout(stores, await store_plan(stores, table))
    snapshot = load_snapshot(
        dict.fromkeys(NODES, 0.0), seq=1, unhealthy=("node-0",), draining=("node-1", "node-2")
    )
    await stores.cluster.publish_load(snapshot)
    requests = [routing_pb2.RouteRequest(key=f"key-{i}") for i in range(20)]
    requests += [routing_pb2.RouteRequest(key=f"tail-{i}") for i in range(200)]
    async with running_router(state_url) as server, router_stub(server) as stub:
        reply = await stub.RouteBatch(routing_pb2.RouteBatchRequest(requests=requests))
    assert {d.node_id for d in reply.decisions} == {"node-3"}
    assert [d.key for d in reply.decisions] == [r.key for r in requests]


async def test_a_pool_added_later_becomes_known_then_routable(
    state_url: str, stores: Stores
) -> None:
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        request = routing_pb2.RouteRequest(pool="blue", key="key-1")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Route(request)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        table = small_plan("blue", seed=4)
        await rollout(stores, await store_plan(stores, table), pool="blue")  # adds the pool

        async def unavailable() -> bool:
            try:
                await stub.Route(request)
            except grpc.aio.AioRpcError as exc:
                return exc.code() == grpc.StatusCode.UNAVAILABLE
            return False

        await eventually(unavailable)
        await stores.cluster.publish_load(
            load_snapshot(dict.fromkeys(NODES, 0.0), seq=1, pool="blue")
        )

        async def routed() -> bool:
            try:
                reply = await stub.Route(request)
            except grpc.aio.AioRpcError:
                return False
            return bool(reply.version == table.version)

        await eventually(routed)
