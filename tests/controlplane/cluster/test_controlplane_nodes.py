"""Node registry and liveness: pure state rules, and agents and static nodes over real gRPC."""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2, agent_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import (
    InvalidAddressError,
    Liveness,
    node_status,
    validate_address,
)
from controlplane.core.node_states import state_of
from tests.support.controlplane import StubAgent, clients, fast_config, node_ids, report, running
from tests.support.polling import eventually
from tests.support.state import on_redis


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


NOW = 1_700_000_000_000


def agent_record(node_id: str = "n1") -> cluster_pb2.NodeRecord:
    return cluster_pb2.NodeRecord(node_id=node_id, pool="default", address="h:1")


def received(msg: agent_pb2.NodeReport, at: int = NOW) -> ReportRecord:
    return ReportRecord(report=msg, received_at_unix_ms=at, stream_id="s")


def test_agent_node_is_down_only_after_three_of_its_own_report_intervals() -> None:
    live = Liveness(timeout_intervals=3, default_interval_ms=250)
    msg = report("n1", running=2, waiting=3, interval_ms=100)
    fresh = node_status(agent_record(), received(msg), NOW + 300, live)
    late = node_status(agent_record(), received(msg), NOW + 301, live)
    assert not fresh.down and fresh.load.healthy and fresh.load.load == 5
    assert late.down and not late.load.healthy
    assert late.last_report_age_ms == 301


def test_report_without_interval_uses_the_configured_one() -> None:
    live = Liveness(timeout_intervals=3, default_interval_ms=250)
    msg = report("n1", interval_ms=0)
    assert not node_status(agent_record(), received(msg), NOW + 750, live).down
    assert node_status(agent_record(), received(msg), NOW + 751, live).down


def test_stale_report_makes_the_node_unhealthy_not_idle_and_not_down() -> None:
    status = node_status(
        agent_record(), received(report("n1", running=4, stale=True)), NOW + 10, Liveness()
    )
    assert not status.down
    assert not status.load.healthy
    assert status.load.load == 4


def test_leaving_or_never_reported_agent_node_is_down() -> None:
    leaving = node_status(agent_record(), received(report("n1", leaving=True)), NOW, Liveness())
    never = node_status(agent_record(), None, NOW, Liveness())
    assert leaving.down and never.down
    assert never.last_report_age_ms == -1


def test_static_node_is_healthy_with_zero_load_and_draining_is_separate() -> None:
    record = cluster_pb2.NodeRecord(node_id="s", address="h:1", static=True, draining=True)
    status = node_status(record, None, NOW, Liveness())
    assert status.load.healthy and not status.down
    assert status.load.draining and status.load.load == 0


@pytest.mark.parametrize(
    "address", ["h:1", "10.0.0.1:8000", "[::1]:50051", "node-a.example.com:65535"]
)
def test_valid_addresses(address: str) -> None:
    assert validate_address(address) == address


@pytest.mark.parametrize(
    "address", ["", "host", ":80", "h:0", "h:65536", "h:x", "::1:80", "a b:1", "h/x:1", "[::1:80"]
)
def test_invalid_addresses_name_the_problem(address: str) -> None:
    with pytest.raises(InvalidAddressError, match="address"):
        validate_address(address)


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


def test_an_agents_draining_report_drains_the_node_until_a_new_stream_joins_without_it() -> None:
    draining = report("n1", running=3)
    draining.draining = True
    status = node_status(agent_record(), received(draining), NOW, Liveness())
    assert status.load.draining and not status.down and state_of(status) == "draining"
    draining.leaving = True  # it left drained: down, and still out of the panic count
    left = node_status(agent_record(), received(draining), NOW, Liveness())
    assert left.down and left.load.draining and state_of(left) == "down"
    rejoined = node_status(agent_record(), received(report("n1")), NOW, Liveness())
    assert not rejoined.load.draining and state_of(rejoined) == "healthy"


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
