"""Load snapshots: the leader publishes registry + latest reports to Redis and the load hint."""

from __future__ import annotations

import asyncio
import time

import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import Hint, ReportRecord
from controlplane.cluster.loads import LoadPublisher, observed_at
from controlplane.cluster.nodes import Liveness
from controlplane.metrics import ControlPlaneMetrics
from tests.support.controlplane import StubAgent, clients, fast_config, report
from tests.support.controlplane import running as running_plane
from tests.support.polling import eventually
from tests.support.state import on_redis


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


def by_node(snapshot: cluster_pb2.LoadSnapshot) -> dict[str, cluster_pb2.NodeLoad]:
    return {n.node_id: n for n in snapshot.nodes}


@pytest.mark.grpc
async def test_snapshot_carries_agent_loads_static_nodes_and_drain(
    state_url: str, stores: Stores
) -> None:
    async with running_plane(fast_config(state_url)) as plane, clients(plane.address) as c:
        a, b = StubAgent(c.agents), StubAgent(c.agents)
        await a.send(report("gpu-a", running=2, waiting=3, interval_ms=60_000))
        await b.send(report("gpu-b", running=1, healthy=False, interval_ms=60_000))
        await a.read()
        await b.read()
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="static-1", address="h:1"))
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="static-2", address="h:2"))
        await c.nodes.SetDraining(admin_pb2.SetDrainingRequest(node_id="static-2", draining=True))

        async def complete() -> bool:
            snap = await stores.cluster.get_load("default")
            return snap is not None and len(snap.nodes) == 4 and by_node(snap)["static-2"].draining

        await eventually(complete)
        snap = await stores.cluster.get_load("default")
        assert snap is not None
        nodes = by_node(snap)
        assert (nodes["gpu-a"].load, nodes["gpu-a"].healthy) == (5, True)
        assert (nodes["gpu-a"].running, nodes["gpu-a"].waiting) == (2, 3)
        assert (nodes["gpu-b"].load, nodes["gpu-b"].healthy) == (1, False)
        assert (nodes["static-1"].load, nodes["static-1"].healthy) == (0, True)
        assert nodes["static-2"].healthy and nodes["static-2"].draining
        assert nodes["static-1"].address == "h:1"
        await a.close()
        await b.close()


@pytest.mark.grpc
@on_redis
async def test_snapshots_reach_the_load_hint_several_times_a_second(
    state_url: str, stores: Stores
) -> None:
    hints: list[Hint] = []
    ready = asyncio.Event()

    async def listen() -> None:
        async for hint in stores.hints.subscribe(["default"]):
            if hint.kind == "resync":
                ready.set()
            elif hint.kind == "load":
                hints.append(hint)
                if len(hints) == 5:
                    return

    listener = asyncio.create_task(listen())
    await asyncio.wait_for(ready.wait(), 5)
    async with running_plane(fast_config(state_url)) as plane, clients(plane.address) as c:
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="s1", address="h:1"))
        await asyncio.wait_for(listener, 5)
    snapshots = [cluster_pb2.LoadSnapshot.FromString(h.payload) for h in hints]
    seqs = [s.seq for s in snapshots]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert all(s.pool == "default" for s in snapshots)
    assert by_node(snapshots[-1])["s1"].healthy


@pytest.mark.grpc
async def test_seq_keeps_growing_across_a_new_leader(state_url: str, stores: Stores) -> None:
    await stores.plans.add_pool("default")
    async with running_plane(fast_config(state_url, instance_id="first")):

        async def published() -> bool:
            snap = await stores.cluster.get_load("default")
            return snap is not None and snap.seq >= 3

        await eventually(published)
    last = await stores.cluster.get_load("default")
    assert last is not None
    async with running_plane(fast_config(state_url, instance_id="second")):

        async def continued() -> bool:
            snap = await stores.cluster.get_load("default")
            return snap is not None and snap.seq > last.seq

        await eventually(continued)


def test_observed_at_is_the_oldest_healthy_scrape_on_the_control_plane_clock() -> None:
    now = int(time.time() * 1000)
    fresh = report("a")
    fresh.sent_at_unix_ms, fresh.scraped_at_unix_ms = 5_000, 4_900  # scraped 100 ms before send
    older = report("b")
    older.sent_at_unix_ms, older.scraped_at_unix_ms = 9_000, 8_700
    sick = report("c", healthy=False)
    reports = {
        "a": ReportRecord(fresh, now - 50, "s"),
        "b": ReportRecord(older, now - 40, "s"),
        "c": ReportRecord(sick, now - 10_000, "s"),
    }
    statuses = [
        admin_pb2.NodeStatus(
            record=cluster_pb2.NodeRecord(node_id=n),
            load=cluster_pb2.NodeLoad(node_id=n, healthy=n != "c"),
        )
        for n in ("a", "b", "c")
    ]
    assert observed_at(statuses, reports, now) == now - 340
    assert observed_at([], {}, now) == now


async def _registered(stores: Stores, node_id: str, received_ms: int, **fields: object) -> None:
    await stores.cluster.put_node(
        cluster_pb2.NodeRecord(node_id=node_id, pool="default", address=f"{node_id}:1")
    )
    msg = report(node_id, interval_ms=100, **fields)  # type: ignore[arg-type]
    await stores.cluster.put_report(
        "default", ReportRecord(report=msg, received_at_unix_ms=received_ms, stream_id="s"),
        claim=True,
    )  # fmt: skip
    await stores.plans.add_pool("default")


@pytest.mark.redis
async def test_a_new_leader_keeps_silent_nodes_up_for_its_grace_then_marks_them_down(
    stores: Stores,
) -> None:
    now = int(time.time() * 1000)
    await _registered(stores, "up", now - 5_000)  # silent for 5 s (the old leader died)
    await _registered(stores, "was-down", now - 60_000)
    await _registered(stores, "stale", now - 5_000, healthy=False, stale=True)
    previous = cluster_pb2.LoadSnapshot(
        pool="default", seq=41, leader_term=6, observed_at_unix_ms=now - 5_000,
        nodes=[cluster_pb2.NodeLoad(node_id="up", healthy=True),
               cluster_pb2.NodeLoad(node_id="was-down", healthy=False),
               cluster_pb2.NodeLoad(node_id="stale", healthy=False)],
    )  # fmt: skip
    await stores.cluster.publish_load(previous)
    publisher = LoadPublisher(stores, ControlPlaneMetrics(), Liveness(3, 100), grace_ms=8_000)
    [first] = await publisher.publish_all(term=1, now_ms=now)
    assert (first.leader_term, first.seq) == (7, 42)  # one term later, seq goes on
    nodes = by_node(first)
    assert nodes["up"].healthy
    assert not nodes["was-down"].healthy and not nodes["stale"].healthy
    [later] = await publisher.publish_all(term=1, now_ms=now + 8_001)
    assert (later.leader_term, later.seq) == (7, 43)
    assert not by_node(later)["up"].healthy  # grace over: still silent, so down


@pytest.mark.redis
async def test_without_grace_a_new_leader_marks_silent_nodes_down_at_once(stores: Stores) -> None:
    now = int(time.time() * 1000)
    await _registered(stores, "up", now - 5_000)
    await stores.cluster.publish_load(
        cluster_pb2.LoadSnapshot(pool="default", seq=1, nodes=[
            cluster_pb2.NodeLoad(node_id="up", healthy=True)])
    )  # fmt: skip
    publisher = LoadPublisher(stores, ControlPlaneMetrics(), Liveness(3, 100), grace_ms=0)
    [first] = await publisher.publish_all(term=1, now_ms=now)
    assert not by_node(first)["up"].healthy
