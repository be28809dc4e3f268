"""Corrupt records in Redis: a pointer, a plan and a load snapshot that do not decode.

Before issue 9 a corrupt active-pointer record stopped any new router from starting (exit 1) and
made running routers' table loops restart every second. Now it is a NACK with the reason, and a
router starts and serves Flat-LB (power-of-two choices, no table) when it has nothing better.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
import redis as redis_py

from cacheroute.v1 import cluster_pb2, routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from cacheroute_state.schema import plan_key, pool_key
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet, until
from tests.support.router import rollout, warm_keys

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(120)]

GARBAGE = b"\xff\xfe not a protobuf \x00\x01"


async def nack_reason(stores: Stores, router_id: str) -> str | None:
    for ack in await stores.cluster.get_acks("default"):
        if ack.router_id == router_id and not ack.accepted:
            return ack.reason
    return None


async def publish_nodes(stores: Stores, node_ids: tuple[str, ...]) -> None:
    await stores.cluster.publish_load(
        cluster_pb2.LoadSnapshot(pool="default", seq=1, leader_term=1, nodes=[
            cluster_pb2.NodeLoad(node_id=n, address=f"{n}:1", healthy=True) for n in node_ids])
    )  # fmt: skip


async def test_a_corrupt_pointer_is_a_nack_and_a_new_router_starts_and_serves(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis().start()
    stores = open_stores(server.url)
    raw = redis_py.Redis.from_url(server.url)
    fleet = Fleet(tmp_path / "logs")
    try:
        table = small_plan()
        await rollout(stores, await store_plan(stores, table))
        await publish_nodes(stores, tuple(table.node_ids))
        running = fleet.router("running", server.url)
        running_address = (await running.logged("router serving", "address"))[0]
        await running.logged("table applied", "version")

        raw.hset(pool_key("default", "active"), "pb", GARBAGE)
        late = fleet.router("late", server.url)
        late_address = (await late.logged("router serving", "address"))[0]

        async def nacked() -> bool:
            reasons = [await nack_reason(stores, r) for r in ("running", "late")]
            return all(r is not None and "corrupt" in r for r in reasons)

        await until(nacked, 10, "both routers NACK the corrupt pointer")
        key = warm_keys(table)[0]
        async with (
            grpc.aio.insecure_channel(running_address) as c1,
            grpc.aio.insecure_channel(late_address) as c2,
        ):
            held = await routing_pb2_grpc.RouterServiceStub(c1).Route(
                routing_pb2.RouteRequest(key=key)
            )
            assert held.version == table.version  # the last good table keeps serving
            fresh = await routing_pb2_grpc.RouterServiceStub(c2).Route(
                routing_pb2.RouteRequest(key=key)
            )
            assert fresh.reason == routing_pb2.ROUTE_REASON_NO_TABLE  # Flat-LB
            assert fresh.node_id in table.node_ids
        await asyncio.sleep(2.0)  # several table ticks (0.5 s)
        for proc in (running, late):
            assert proc.events("loop failed; restarting it") == []
            assert len(proc.events("active pointer rejected")) == 1  # once per episode
            assert "Traceback" not in proc.log_path.read_text()
    finally:
        fleet.stop()
        raw.close()
        await stores.close()
        server.stop()


async def test_a_corrupt_plan_record_and_load_record_do_not_stop_a_router(tmp_path: Path) -> None:
    server = EmbeddedRedis().start()
    stores = open_stores(server.url)
    raw = redis_py.Redis.from_url(server.url)
    fleet = Fleet(tmp_path / "logs")
    try:
        table = small_plan()
        await rollout(stores, await store_plan(stores, table))
        await publish_nodes(stores, tuple(table.node_ids))
        raw.set(plan_key("default", table.version), GARBAGE)
        raw.set(pool_key("default", "load"), GARBAGE)
        router = fleet.router("router", server.url)
        address = (await router.logged("router serving", "address"))[0]

        async def nacked() -> bool:
            return (await nack_reason(stores, "router")) is not None

        await until(nacked, 10, "the router NACKs the corrupt plan")
        assert router.events("stored load snapshot is corrupt")
        await publish_nodes(stores, tuple(table.node_ids))  # a good snapshot arrives later
        async with grpc.aio.insecure_channel(address) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)

            async def serves() -> bool:
                answer = await stub.Route(routing_pb2.RouteRequest(key="k"))
                return answer.node_id in table.node_ids

            await until(serves, 10, "the router serves Flat-LB")
        assert router.running()
        assert "Traceback" not in router.log_path.read_text()
    finally:
        fleet.stop()
        raw.close()
        await stores.close()
        server.stop()
