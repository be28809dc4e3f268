"""The state contract for node reports and their owning streams (twin and real Redis)."""

from __future__ import annotations

from cacheroute.v1 import agent_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord


def record(node: str, stream: str, at: int, running: float = 0) -> ReportRecord:
    report = agent_pb2.NodeReport(node_id=node, pool="p", address="h:1", running=running)
    return ReportRecord(report=report, received_at_unix_ms=at, stream_id=stream)


async def test_claim_then_only_the_owning_stream_writes(stores: Stores) -> None:
    assert await stores.cluster.get_report("p", "n1") is None
    assert not await stores.cluster.put_report("p", record("n1", "s1", 1), claim=False)
    assert await stores.cluster.put_report("p", record("n1", "s1", 2, running=3), claim=True)
    assert await stores.cluster.put_report("p", record("n1", "s1", 3, running=4), claim=False)
    assert await stores.cluster.put_report("p", record("n1", "s2", 4, running=9), claim=True)
    assert not await stores.cluster.put_report("p", record("n1", "s1", 5), claim=False)
    stored = await stores.cluster.get_report("p", "n1")
    assert stored is not None
    assert (stored.stream_id, stored.received_at_unix_ms, stored.report.running) == ("s2", 4, 9)


async def test_get_reports_and_remove_report(stores: Stores) -> None:
    await stores.cluster.put_report("p", record("a", "s1", 10), claim=True)
    await stores.cluster.put_report("p", record("b", "s2", 20), claim=True)
    reports = await stores.cluster.get_reports("p")
    assert {k: (v.stream_id, v.received_at_unix_ms) for k, v in reports.items()} == {
        "a": ("s1", 10),
        "b": ("s2", 20),
    }
    await stores.cluster.remove_report("p", "a")
    assert set(await stores.cluster.get_reports("p")) == {"b"}
    assert not await stores.cluster.put_report("p", record("a", "s1", 30), claim=False)


async def test_get_node_reads_one_record(stores: Stores) -> None:
    assert await stores.cluster.get_node("p", "x") is None
    await stores.cluster.put_node(cluster_pb2.NodeRecord(node_id="x", pool="p", address="h:9"))
    node = await stores.cluster.get_node("p", "x")
    assert node is not None and node.address == "h:9"


async def test_expire_report_removes_only_the_record_it_was_judged_on(stores: Stores) -> None:
    await stores.cluster.put_report("p", record("a", "s1", 10), claim=True)
    await stores.cluster.put_report("p", record("b", "s2", 20), claim=True)
    # A newer report arrived after the sweep read "a" at 10: the expiry must not remove it.
    await stores.cluster.put_report("p", record("a", "s1", 15), claim=False)
    assert not await stores.cluster.expire_report("p", "a", 10)
    assert not await stores.cluster.expire_report("p", "gone", 10)
    assert await stores.cluster.expire_report("p", "b", 20)
    assert set(await stores.cluster.get_reports("p")) == {"a"}
    assert await stores.cluster.get_report("p", "b") is None
    # The owning stream is forgotten too: a late write from it fails, as after remove_report.
    assert not await stores.cluster.put_report("p", record("b", "s2", 30), claim=False)
    assert not await stores.cluster.expire_report("p", "b", 20)
