"""The leader's snapshots carry NodeColumns that agree with their nodes, and a router applies
them by columns (one numpy pass) to the same view as node by node."""

from __future__ import annotations

import copy
import time

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.loads import LoadPublisher
from controlplane.cluster.nodes import Liveness
from controlplane.metrics import ControlPlaneMetrics
from dataplane.core.load_columns import membership_digest, read_columns
from dataplane.core.router import Router
from tests.support.controlplane import report


async def test_published_columns_agree_with_the_nodes_and_apply_the_same(
    memory_stores: Stores,
) -> None:
    stores = memory_stores
    now = int(time.time() * 1000)
    await stores.plans.add_pool("default")
    for index, (running, healthy) in enumerate([(2, True), (0, False), (7, True)]):
        node = f"gpu-{index}"
        await stores.cluster.put_node(
            cluster_pb2.NodeRecord(node_id=node, pool="default", address=f"10.0.0.{index}:8000")
        )
        msg = report(node, running=running, healthy=healthy, interval_ms=100)
        await stores.cluster.put_report(
            "default", ReportRecord(report=msg, received_at_unix_ms=now - 50 * index,
                                    stream_id="s"), claim=True,
        )  # fmt: skip
    await stores.cluster.put_node(
        cluster_pb2.NodeRecord(node_id="static", pool="default", static=True, draining=True)
    )
    publisher = LoadPublisher(stores, ControlPlaneMetrics(), Liveness(3, 100), grace_ms=0)
    [snapshot] = await publisher.publish_all(term=1, now_ms=now)
    columns = read_columns(snapshot)
    assert columns is not None
    nodes = list(snapshot.nodes)
    assert columns.loads.tolist() == [n.load for n in nodes]
    assert columns.healthy.tolist() == [n.healthy for n in nodes]
    assert columns.draining.tolist() == [n.draining for n in nodes]
    assert columns.age_ms.tolist() == [n.age_ms for n in nodes]
    ids = [n.node_id for n in nodes]
    assert columns.membership == membership_digest(ids, [n.address or n.node_id for n in nodes])
    plain = copy.deepcopy(snapshot)
    plain.ClearField("columns")
    by_columns, by_nodes = Router(), Router()
    assert by_columns.apply_load(snapshot) and by_nodes.apply_load(plain)
    a, b = by_columns.pools["default"].view, by_nodes.pools["default"].view
    assert (a.nodes.ids, a.loads, a.healthy, a.draining, a.eligible_nodes) == (
        b.nodes.ids,
        b.loads,
        b.healthy,
        b.draining,
        b.eligible_nodes,
    )
