"""Agent streams that go wrong after the join: identity changes, bad addresses, the registry lost
under a live stream, Redis away mid-stream. Real control plane, real gRPC streams, real Redis.

Every refusal ends the stream with a status and a message naming the problem; a stream that ends
after its join marks its node down, and a fresh stream can rejoin.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import grpc
import pytest
import redis

from cacheroute.v1 import admin_pb2, agent_pb2
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from controlplane.cluster.nodes import remove_node
from tests.support.controlplane import StubAgent, clients, quick_config, report, running
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


async def refused_with(agent: StubAgent, code: grpc.StatusCode, words: str) -> None:
    assert await agent.status() == code
    assert words in (await agent.call.details() or "")


@pytest.mark.parametrize(
    ("second", "code", "words"),
    [
        (report("gpu-2"), grpc.StatusCode.INVALID_ARGUMENT, "node_id changed from 'gpu-1'"),
        (report("gpu-1", pool="blue"), grpc.StatusCode.INVALID_ARGUMENT, "pool changed"),
        (report("gpu-1", pool="Not A Pool"), grpc.StatusCode.INVALID_ARGUMENT, "pool"),
        (
            report("gpu-1", address="no-port-here"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "no-port-here",
        ),
    ],
    ids=["node id changed", "pool changed", "pool malformed", "address malformed"],
)
async def test_a_bad_heartbeat_ends_the_stream_naming_it_and_marks_the_node_down(
    redis_url: str, second: agent_pb2.NodeReport, code: grpc.StatusCode, words: str
) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", address="10.0.0.1:8000", interval_ms=60_000))
        await agent.read()
        await agent.send(second)
        await refused_with(agent, code, words)
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
        assert [(n.record.node_id, n.down) for n in nodes] == [("gpu-1", True)]
        assert (await c.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="blue"))).nodes == []


async def test_first_report_without_an_address_is_refused_naming_it(redis_url: str) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(agent_pb2.NodeReport(node_id="gpu-1", pool="default"))
        await refused_with(agent, grpc.StatusCode.INVALID_ARGUMENT, "must carry address")
        assert (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes == []


async def test_an_engine_that_moved_updates_the_registered_address(
    redis_url: str, stores: Stores
) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", address="10.0.0.1:8000", interval_ms=60_000))
        await agent.read()
        await agent.send(report("gpu-1", address="10.0.0.9:8001", interval_ms=60_000))

        async def moved() -> bool:
            record = await stores.cluster.get_node("default", "gpu-1")
            return record is not None and record.address == "10.0.0.9:8001"

        await eventually(moved)
        # a heartbeat without an address keeps the last one
        await agent.send(agent_pb2.NodeReport(node_id="gpu-1", running=2, report_interval_ms=100))

        async def loaded() -> bool:
            got = await stores.cluster.get_report("default", "gpu-1")
            return got is not None and got.report.running == 2

        await eventually(loaded)
        got = await stores.cluster.get_report("default", "gpu-1")
        assert got is not None and got.report.address == "10.0.0.9:8001"
        await agent.close()


async def lose_the_registry_entry(redis_url: str, how: str) -> None:
    if how == "removed at the store":
        # RemoveNode refuses a live agent's node (issue 10); the session must still cope when
        # the record vanishes under it (another control plane, or a store-level removal).
        direct = open_stores(redis_url)
        try:
            assert await remove_node(direct, pool="default", node_id="gpu-1", actor="t", now_ms=0)
        finally:
            await direct.close()
    else:
        client = redis.Redis.from_url(redis_url)
        client.flushall()  # Redis restarted without persistence: the stream owns nothing now
        client.close()


@pytest.mark.parametrize("how", ["removed at the store", "redis emptied"])
async def test_a_registry_entry_lost_under_a_live_stream_aborts_it_and_the_agent_can_rejoin(
    redis_url: str, how: str
) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", interval_ms=60_000))
        await agent.read()
        await lose_the_registry_entry(redis_url, how)
        await agent.send(report("gpu-1", interval_ms=60_000))
        await refused_with(agent, grpc.StatusCode.ABORTED, "reconnect to rejoin")
        assert (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes == []
        again = StubAgent(c.agents)
        await again.send(report("gpu-1", interval_ms=60_000))
        assert "joined" in (await again.read()).message
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
        assert [(n.record.node_id, n.down) for n in nodes] == [("gpu-1", False)]
        await again.close()


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    try:
        yield server
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)
        server.stop()


async def test_redis_lost_mid_stream_ends_it_unavailable_and_the_agent_rejoins_after(
    own_redis: EmbeddedRedis,
) -> None:
    config = quick_config(own_redis.url, leader_lease_ttl_s=3.0)
    port = own_redis.port
    restarted: EmbeddedRedis | None = None
    try:
        async with running(config) as plane, clients(plane.address) as c:
            agent = StubAgent(c.agents)
            await agent.send(report("gpu-1", interval_ms=60_000))
            await agent.read()
            own_redis.stop()
            await agent.send(report("gpu-1", interval_ms=60_000))
            await refused_with(agent, grpc.StatusCode.UNAVAILABLE, "redis")
            restarted = EmbeddedRedis(port=port).start()  # back, empty
            again = StubAgent(c.agents)
            await again.send(report("gpu-1", interval_ms=60_000))
            assert "joined" in (await again.read()).message
            nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
            assert [(n.record.node_id, n.down) for n in nodes] == [("gpu-1", False)]
            await again.close()
    finally:
        if restarted is not None:
            restarted.stop()
