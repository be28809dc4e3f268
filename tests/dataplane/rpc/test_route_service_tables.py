"""The router over real gRPC follows the plans: rollouts by generation, NACKs of invalid tables,
a late start (on the state twin; the rollout also on a real Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from cacheroute.v1 import routing_pb2, table_pb2
from cacheroute_state import Stores
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import table_to_proto
from tests.support.factories import metadata_for, small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    ack_of,
    follows,
    load_snapshot,
    rollout,
    router_stub,
    running_router,
    scrape,
    warm_keys,
)
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


@on_redis
async def test_a_rollout_is_applied_on_its_hint_and_answers_follow_each_generation(
    state_url: str, stores: Stores
) -> None:
    tables = [small_plan(seed=s) for s in (1, 2)]
    v1, v2 = [await store_plan(stores, t) for t in tables]
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        first = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
        assert first.reason == routing_pb2.ROUTE_REASON_NO_TABLE
        for version, table, generation in ((v1, tables[0], 1), (v2, tables[1], 2)):
            assert await rollout(stores, version) == generation

            async def applied(version: str = version) -> bool:
                reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
                return reply.version == version

            await eventually(applied, timeout=5.0)  # only the hint: the poll is 60 s (QUIET)
            for key in warm_keys(table):
                decision = await stub.Route(routing_pb2.RouteRequest(key=key, request_id=key))
                assert (decision.version, decision.generation) == (version, generation)
                assert decision.reason == routing_pb2.ROUTE_REASON_WARM
                assert follows(table, key, decision)
                assert (decision.key, decision.request_id) == (key, key)
                assert decision.address == f"{decision.node_id}.engines:8000"

            async def acked(generation: int = generation) -> bool:  # sent after the swap
                ack = await ack_of(stores)
                return bool(ack and ack.generation == generation)

            await eventually(acked)
            ack = await ack_of(stores)
            assert (ack.version, ack.generation, ack.accepted) == (version, generation, True)
            assert (ack.serving_version, ack.listen_address) == (version, server.address)
        back = await rollout(stores, v1)  # a rollback is a new, higher generation
        await eventually(lambda: _serving(stub, v1, back), timeout=5.0)
        metrics = scrape(server)
    assert 'cacheroute_router_table_generation{pool="default"} 3.0' in metrics
    assert f'cacheroute_router_table_info{{pool="default",version="{v1}"}} 1.0' in metrics
    assert 'cacheroute_router_table_updates_total{pool="default",result="applied"} 3.0' in metrics


async def _serving(stub: Any, version: str, generation: int) -> bool:
    reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
    return bool(reply.version == version and reply.generation == generation)


def corrupt_members(table: RoutingTable) -> bytes:
    msg = table_to_proto(table)
    members = np.frombuffer(msg.set_members, dtype="<u2").copy()
    members[0] = 999
    msg.set_members = members.tobytes()
    return msg.SerializeToString()


async def test_an_invalid_table_is_nacked_and_the_last_good_one_keeps_serving(
    state_url: str, stores: Stores
) -> None:
    good, broken = small_plan(seed=1), small_plan(seed=2)
    v1 = await store_plan(stores, good)
    garbage_meta = table_pb2.PlanMetadata(
        pool="default", version="p00000000000000aa", content_hash="0" * 64
    )
    await stores.plans.put_plan(b"\x08\x01garbage, not a table", garbage_meta)
    await stores.plans.put_plan(corrupt_members(broken), metadata_for(broken))
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    await rollout(stores, v1)
    async with (
        running_router(state_url, table_interval_s=0.1) as server,
        router_stub(server) as stub,
    ):
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        for version, reason in (
            ("p00000000000000aa", "not a RoutingTable protobuf"),
            (broken.version, "a set member is 999; there are 4 nodes"),
        ):
            generation = await rollout(stores, version)

            async def nacked(version: str = version, generation: int = generation) -> bool:
                ack = await ack_of(stores)
                return bool(ack and ack.generation == generation and not ack.accepted)

            await eventually(nacked)
            ack = await ack_of(stores)
            assert ack.version == version
            assert reason in ack.reason
            assert (ack.serving_version, ack.serving_generation) == (v1, 1)
            for key in warm_keys(good):
                decision = await stub.Route(routing_pb2.RouteRequest(key=key))
                assert (decision.version, decision.generation) == (v1, 1)
                assert follows(good, key, decision)
        await asyncio.sleep(0.5)  # several timer ticks: a rejected generation is not re-fetched
        metrics = scrape(server)
    assert 'cacheroute_router_table_updates_total{pool="default",result="rejected"} 2.0' in metrics


async def test_a_router_started_after_a_rollout_serves_it_from_its_first_request(
    state_url: str, stores: Stores
) -> None:
    table = small_plan(seed=3)
    version = await store_plan(stores, table)
    generation = await rollout(stores, version)
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    key = warm_keys(table)[0]
    async with running_router(state_url, router_id="late") as server, router_stub(server) as stub:
        decision = await stub.Route(routing_pb2.RouteRequest(key=key))
        assert (decision.version, decision.generation) == (version, generation)
        assert decision.reason == routing_pb2.ROUTE_REASON_WARM
        assert follows(table, key, decision)
        ack = await ack_of(stores, "late")
        assert (ack.version, ack.accepted) == (version, True)
