"""Agent nodes over real gRPC: join, heartbeat, leave, silence, stale reports, refusals and
drain directives (on the state twin; the join also on a real Redis)."""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2, agent_pb2
from cacheroute_state import Stores
from tests.support.controlplane import StubAgent, clients, fast_config, node_ids, report, running
from tests.support.polling import eventually
from tests.support.state import on_redis


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


@pytest.mark.grpc
@on_redis
async def test_agent_join_heartbeat_leave_over_grpc(state_url: str, stores: Stores) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", pool="blue", address="10.1.0.1:8000", running=1))
        joined = await agent.read()
        assert joined.report_interval_ms == 50  # one report per snapshot
        assert not joined.draining and "joined" in joined.message
        record = await stores.cluster.get_node("blue", "gpu-1")
        assert record is not None and not record.static and record.address == "10.1.0.1:8000"
        assert "blue" in await stores.plans.pools()

        await agent.send(report("gpu-1", pool="blue", address="10.1.0.1:8000", running=7))

        async def load_is_seven() -> bool:
            nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="blue"))).nodes
            return len(nodes) == 1 and nodes[0].load.load == 7 and not nodes[0].down

        await eventually(load_is_seven)
        await agent.send(report("gpu-1", pool="blue", address="10.1.0.1:8000", leaving=True))
        assert await agent.status() == grpc.StatusCode.OK
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="blue"))).nodes
        assert node_ids(nodes) == ["gpu-1"] and nodes[0].down


@pytest.mark.grpc
async def test_stream_end_marks_the_node_down(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", interval_ms=60_000))
        await agent.read()
        await agent.close()
        assert await agent.status() == grpc.StatusCode.OK
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
        assert nodes[0].down


@pytest.mark.grpc
async def test_silent_agent_is_marked_down_after_three_intervals(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", interval_ms=100))
        await agent.read()

        async def down() -> bool:
            nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
            return nodes[0].down

        assert not await down()
        await eventually(down, timeout=3)
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
        assert nodes[0].last_report_age_ms > 300
        agent.call.cancel()


@pytest.mark.grpc
async def test_stale_agent_report_is_unhealthy_in_the_snapshot(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", running=3))
        await agent.read()
        await agent.send(report("gpu-1", running=3, stale=True))

        async def unhealthy() -> bool:
            snapshot = await stores.cluster.get_load("default")
            return snapshot is not None and not snapshot.nodes[0].healthy

        await eventually(unhealthy)
        snapshot = await stores.cluster.get_load("default")
        assert snapshot is not None and snapshot.nodes[0].load == 3
        await agent.close()


@pytest.mark.grpc
async def test_bad_first_report_is_invalid_argument(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        cases = [
            (report("bad id!"), "node id"),
            (report("n1", pool="Bad Pool"), "pool"),
            (report("n1", address="no-port"), "address"),
            (agent_pb2.NodeReport(pool="default", address="h:1"), "node_id"),
        ]
        for msg, word in cases:
            agent = StubAgent(c.agents)
            await agent.send(msg)
            assert await agent.status() == grpc.StatusCode.INVALID_ARGUMENT
            assert word in (await agent.call.details() or "")


@pytest.mark.grpc
async def test_second_agent_with_the_same_id_elsewhere_is_refused(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        first = StubAgent(c.agents)
        await first.send(report("gpu-1", address="10.0.0.1:1", interval_ms=60_000))
        await first.read()
        second = StubAgent(c.agents)
        await second.send(report("gpu-1", address="10.0.0.2:1"))
        assert await second.status() == grpc.StatusCode.ALREADY_EXISTS
        assert "taken by another agent" in (await second.call.details() or "")
        # The same agent reconnecting (same address) takes its node over; the old stream is cut.
        again = StubAgent(c.agents)
        await again.send(report("gpu-1", address="10.0.0.1:1"))
        await again.read()
        await first.send(report("gpu-1", address="10.0.0.1:1"))
        assert await first.status() == grpc.StatusCode.ABORTED
        nodes = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest())).nodes
        assert not nodes[0].down  # the superseded stream did not mark the node down
        await again.close()


@pytest.mark.grpc
async def test_drain_reaches_the_agent_as_a_directive(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1"))
        await agent.read()
        status = await c.nodes.SetDraining(
            admin_pb2.SetDrainingRequest(node_id="gpu-1", draining=True, actor="alice")
        )
        assert status.record.draining
        await agent.send(report("gpu-1"))
        directive = await agent.read()
        assert directive.draining and directive.message == "drained"
        await agent.send(report("gpu-1"))  # no change: no directive
        await c.nodes.SetDraining(admin_pb2.SetDrainingRequest(node_id="gpu-1", draining=False))
        await agent.send(report("gpu-1"))
        assert not (await agent.read()).draining
        await agent.close()
        # The drain survives a rejoin.
        await c.nodes.SetDraining(admin_pb2.SetDrainingRequest(node_id="gpu-1", draining=True))
        rejoined = StubAgent(c.agents)
        await rejoined.send(report("gpu-1"))
        assert (await rejoined.read()).draining
        await rejoined.close()


@pytest.mark.grpc
async def test_the_agents_own_drain_is_confirmed_by_a_directive(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", running=2))
        assert not (await agent.read()).draining
        leaving_soon = report("gpu-1", running=2)
        leaving_soon.draining = True
        await agent.send(leaving_soon)
        confirmed = await agent.read()
        assert confirmed.draining and confirmed.message == "drained"
        record = await plane.stores.cluster.get_node("default", "gpu-1") if plane.stores else None
        assert record is not None and not record.draining  # the registry is not touched
        await agent.close()
