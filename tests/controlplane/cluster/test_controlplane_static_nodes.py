"""Static nodes over real gRPC: add, list, drain and remove with audit, and the refusals where a
live agent owns the id (on the state twin; the agent races on a real Redis)."""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from tests.support.controlplane import StubAgent, clients, fast_config, node_ids, report, running


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


@pytest.mark.grpc
async def test_static_nodes_add_list_drain_remove_with_audit(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        added = await c.nodes.AddNode(
            admin_pb2.AddNodeRequest(
                pool="blue", node_id="s1", address="10.2.0.1:8000", weight=2, actor="alice"
            )
        )
        assert added.static and added.weight == 2
        listed = (await c.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="blue"))).nodes
        assert node_ids(listed) == ["s1"]
        assert listed[0].load.healthy and listed[0].load.weight == 2
        drained = await c.nodes.SetDraining(
            admin_pb2.SetDrainingRequest(pool="blue", node_id="s1", draining=True, actor="bob")
        )
        assert drained.load.draining
        removed = await c.nodes.RemoveNode(
            admin_pb2.RemoveNodeRequest(pool="blue", node_id="s1", actor="carol")
        )
        assert removed.removed
        again = await c.nodes.RemoveNode(admin_pb2.RemoveNodeRequest(pool="blue", node_id="s1"))
        assert not again.removed
        audit = await stores.plans.read_audit("blue", 10)
        assert [(e.action, e.actor) for e in audit] == [
            ("node_add", "unverified:alice"),
            ("drain", "unverified:bob"),
            ("node_remove", "unverified:carol"),
        ]


@pytest.mark.grpc
async def test_node_rpcs_refuse_bad_input_with_a_message(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        bad = [
            (admin_pb2.AddNodeRequest(pool="UPPER", node_id="n", address="h:1"), "pool"),
            (admin_pb2.AddNodeRequest(node_id="-bad", address="h:1"), "node id"),
            (admin_pb2.AddNodeRequest(node_id="n", address="h:99999"), "port"),
            (admin_pb2.AddNodeRequest(node_id="n", address="h:1", weight=-1), "weight"),
        ]
        for request, word in bad:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await c.nodes.AddNode(request)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert word in (raised.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await c.nodes.SetDraining(admin_pb2.SetDrainingRequest(node_id="ghost"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert "ghost" in (missing.value.details() or "")


@pytest.mark.grpc
async def test_static_add_is_refused_while_a_live_agent_owns_the_id(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", interval_ms=60_000))
        await agent.read()
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="gpu-1", address="h:1"))
        assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
        await agent.close()
        assert await agent.status() == grpc.StatusCode.OK  # the leave is written by then
        record = await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="gpu-1", address="h:1"))
        assert record.static


@pytest.mark.redis
@pytest.mark.grpc
async def test_removing_a_live_agents_node_is_refused_until_the_agent_leaves(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        agent = StubAgent(c.agents)
        await agent.send(report("gpu-1", address="10.1.0.1:8000", interval_ms=60_000))
        await agent.read()
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await c.nodes.RemoveNode(admin_pb2.RemoveNodeRequest(node_id="gpu-1"))
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        message = raised.value.details() or ""
        assert "live agent" in message and "stop that agent" in message and "drain" in message
        assert await stores.cluster.get_node("default", "gpu-1") is not None
        await agent.send(report("gpu-1", address="10.1.0.1:8000", leaving=True))
        assert await agent.status() == grpc.StatusCode.OK
        removed = await c.nodes.RemoveNode(admin_pb2.RemoveNodeRequest(node_id="gpu-1"))
        assert removed.removed


@pytest.mark.redis
@pytest.mark.grpc
async def test_adding_an_existing_id_is_refused_unless_replace(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n1", address="10.0.0.1:8000"))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n1", address="10.0.0.9:8000"))
        assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "already registered" in (raised.value.details() or "")
        assert "--replace" in (raised.value.details() or "")
        record = await stores.cluster.get_node("default", "n1")
        assert record is not None and record.address == "10.0.0.1:8000"
        await c.nodes.AddNode(
            admin_pb2.AddNodeRequest(node_id="n1", address="10.0.0.9:8000", replace=True)
        )
        record = await stores.cluster.get_node("default", "n1")
        assert record is not None and record.address == "10.0.0.9:8000"
