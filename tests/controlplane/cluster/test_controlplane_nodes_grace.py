"""Listing nodes during a new leader's grace: as routers treat them, with the reason."""

from __future__ import annotations

from cachectl.nodes_cmd import node_rows
from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import Liveness, list_statuses
from tests.support.controlplane import report

NOW = 1_700_000_000_000
LIVE = Liveness(timeout_intervals=3, default_interval_ms=250)  # 100 ms reports: 300 ms timeout


async def silent_nodes(stores: Stores) -> None:
    """Three agent nodes whose last reports are 2 s old, and one reporting now."""
    for node_id, at in (("quiet", NOW - 2000), ("left", NOW - 2000), ("late", NOW - 2000),
                        ("live", NOW)):  # fmt: skip
        await stores.cluster.put_node(
            cluster_pb2.NodeRecord(node_id=node_id, pool="default", address="h:1")
        )
        msg = report(node_id, interval_ms=100, leaving=node_id == "left")
        await stores.cluster.put_report(
            "default", ReportRecord(report=msg, received_at_unix_ms=at, stream_id="s"), claim=True
        )


def published(ages: dict[str, int]) -> cluster_pb2.LoadSnapshot:
    return cluster_pb2.LoadSnapshot(
        pool="default",
        leader_term=2,
        seq=9,
        nodes=[cluster_pb2.NodeLoad(node_id=n, healthy=True, age_ms=a) for n, a in ages.items()],
    )


async def test_a_silent_node_the_leader_keeps_up_lists_as_healthy_with_the_grace_reason(
    state_stores: Stores,
) -> None:
    await silent_nodes(state_stores)
    # published healthy although silent past its timeout: only the leader's grace does that.
    # "late" was published healthy while still fresh (age 100 ms): it is down, not graced.
    await state_stores.cluster.publish_load(
        published({"quiet": 1900, "left": 1900, "late": 100, "live": 0})
    )
    by_reports = await list_statuses(state_stores, "default", NOW, LIVE)
    assert {s.record.node_id for s in by_reports if s.down} == {"quiet", "left", "late"}
    listed = {
        s.record.node_id: s
        for s in await list_statuses(state_stores, "default", NOW, LIVE, as_routed=True)
    }
    assert not listed["quiet"].down and listed["quiet"].load.healthy
    assert listed["quiet"].reason.startswith("leader grace: no report for 2.0 s")
    assert listed["left"].down and not listed["left"].reason  # a leave is not covered
    assert listed["late"].down and not listed["late"].reason
    assert not listed["live"].down and not listed["live"].reason
    rows = {row[0]: row for row in node_rows(list(listed.values()))}
    assert rows["quiet"][3] == "healthy (leader grace)"
    assert rows["late"][3] == "down"


async def test_without_a_snapshot_or_once_it_shows_the_node_down_it_lists_as_down(
    state_stores: Stores,
) -> None:
    await silent_nodes(state_stores)
    statuses = await list_statuses(state_stores, "default", NOW, LIVE, as_routed=True)
    assert {s.record.node_id for s in statuses if s.down} == {"quiet", "left", "late"}
    snapshot = published({"quiet": 1900})
    snapshot.nodes[0].healthy = False  # the grace is over: the leader published it down
    await state_stores.cluster.publish_load(snapshot)
    statuses = await list_statuses(state_stores, "default", NOW, LIVE, as_routed=True)
    quiet = next(s for s in statuses if s.record.node_id == "quiet")
    assert quiet.down and quiet.reason == "" and isinstance(quiet, admin_pb2.NodeStatus)
