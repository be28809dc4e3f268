"""The leader's report sweep: stored reports of agents gone without leaving are forgotten."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
import structlog

from cacheroute.v1 import admin_pb2, agent_pb2
from cacheroute_state import Stores, schema
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import Liveness
from controlplane.cluster.report_sweep import ReportSweeper
from controlplane.metrics import ControlPlaneMetrics
from controlplane.server import ControlPlane
from tests.support.controlplane import StubAgent, clients, fast_config, report, running
from tests.support.polling import eventually
from tests.support.state import on_redis

NOW = 1_700_000_000_000


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


def stored(node: str, at: int, interval_ms: int = 100) -> ReportRecord:
    msg = agent_pb2.NodeReport(node_id=node, pool="p", address="h:1")
    msg.report_interval_ms = interval_ms
    return ReportRecord(report=msg, received_at_unix_ms=at, stream_id=f"s-{node}")


async def test_sweep_removes_expired_reports_logs_and_counts_each_once(stores: Stores) -> None:
    await stores.plans.add_pool("p")
    await stores.cluster.put_report("p", stored("gone", NOW - 20_000), claim=True)
    await stores.cluster.put_report("p", stored("live", NOW - 50), claim=True)
    metrics = ControlPlaneMetrics()
    sweeper = ReportSweeper(stores, metrics, Liveness(3, 250), retention_ms=10_000)
    with structlog.testing.capture_logs() as logs:
        removed = await sweeper.sweep_all(NOW)
        again = await sweeper.sweep_all(NOW + 1)
    assert [(r.node_id, r.age_ms) for r in removed] == [("gone", 20_000)]
    assert again == []
    assert set(await stores.cluster.get_reports("p")) == {"live"}
    lines = [e for e in logs if e["event"] == "stored agent report expired"]
    assert [(e["node_id"], e["age_s"], e["pool"]) for e in lines] == [("gone", 20.0, "p")]
    counted = metrics.registry.get_sample_value(
        "cacheroute_controlplane_reports_expired_total", {"pool": "p"}
    )
    assert counted == 1


async def test_sweep_keeps_a_slow_agents_report_until_its_node_is_down(stores: Stores) -> None:
    """An agent on a 60 s interval is not down after 20 s: its report outlives a 10 s retention
    until its node's timeout (3 intervals) has passed too."""
    await stores.plans.add_pool("p")
    await stores.cluster.put_report("p", stored("slow", NOW - 20_000, 60_000), claim=True)
    sweeper = ReportSweeper(stores, ControlPlaneMetrics(), Liveness(3, 250), retention_ms=10_000)
    assert await sweeper.sweep_all(NOW) == []
    assert [r.node_id for r in await sweeper.sweep_all(NOW + 160_001)] == ["slow"]


@pytest.mark.grpc
@on_redis
async def test_report_of_an_agent_that_never_left_is_gone_from_redis_after_retention(
    state_url: str, stores: Stores
) -> None:
    """A real agent stream on instance A, which stops (its streams end without marking nodes
    down, as for agents that reconnect elsewhere); the agent never comes back. The leader that
    takes over (B) forgets the report after ``report_retention_s``; the node stays listed down."""
    key = schema.pool_key("blue", "reports")
    raw = aioredis.Redis.from_url(state_url)
    options = {"report_retention_s": 1.0, "leader_grace_s": 0.0}
    try:
        async with running(fast_config(state_url, instance_id="cp-b", **options)) as b:
            a = ControlPlane(fast_config(state_url, instance_id="cp-a", **options))
            await a.start()
            try:
                async with clients(a.address) as c:
                    agent = StubAgent(c.agents)
                    await agent.send(report("gpu-1", pool="blue", address="10.1.0.1:8000"))
                    await agent.read()
                    assert await raw.hexists(key, "gpu-1")
                    # A stops while the agent's stream is still open (closing the channel first
                    # would be a goodbye: the stream's end marks the node down); the agent is
                    # then gone for good.
                    await a.stop()
            finally:
                await a.stop()
            last = await stores.cluster.get_report("blue", "gpu-1")
            assert last is not None and not last.report.leaving

            async def forgotten() -> bool:
                return not await raw.hexists(key, "gpu-1")

            await eventually(forgotten, timeout=30.0, every=0.05)
            assert not await raw.hexists(schema.pool_key("blue", "report_streams"), "gpu-1")
            assert b.leader is not None and b.leader.is_leader
            expired = b.metrics.registry.get_sample_value(
                "cacheroute_controlplane_reports_expired_total", {"pool": "blue"}
            )
            assert expired == 1
            async with clients(b.address) as cb:
                listed = await cb.nodes.ListNodes(admin_pb2.ListNodesRequest(pool="blue"))
            assert [(n.record.node_id, n.down) for n in listed.nodes] == [("gpu-1", True)]
    finally:
        await raw.aclose()
