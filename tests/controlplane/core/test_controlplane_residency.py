"""The KV-event residency section of a report: checked like every field, copied into the node's
load entry (what `cachectl status` shows and routers read), absent when the agent has none."""

from __future__ import annotations

import pytest

from cacheroute.v1 import agent_pb2, cluster_pb2
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import Liveness, node_status
from controlplane.core.report_checks import InvalidReportError, ReportRules, check_report
from controlplane.core.residency import (
    collapsed_keys,
    demote,
    eviction_pressure,
    prefix_anchors,
    watch_lists,
)
from tests.support.controlplane import report
from tests.support.factories import small_plan


def with_residency(**fields: float) -> agent_pb2.NodeReport:
    msg = report("n")
    msg.residency.CopyFrom(agent_pb2.KvResidency(resident_blocks=10, **fields))  # type: ignore[arg-type]
    return msg


@pytest.mark.parametrize(
    "fields",
    [{"evictions_per_s": float("nan")}, {"stores_per_s": -1.0}, {"evictions_per_s": 1e12}],
)
def test_a_bad_residency_rate_is_refused_with_its_own_reason(fields: dict[str, float]) -> None:
    with pytest.raises(InvalidReportError) as caught:
        check_report(with_residency(**fields), ReportRules())
    assert caught.value.reason == "residency"


def test_a_sane_residency_passes() -> None:
    check_report(with_residency(evictions_per_s=120.0, stores_per_s=300.0), ReportRules())


def test_eviction_pressure_is_the_fraction_of_capacity_evicted_per_second() -> None:
    assert eviction_pressure(100.0, 16, 16_000) == pytest.approx(0.1)
    assert eviction_pressure(100.0, 0, 16_000) is None
    assert eviction_pressure(100.0, 16, 0) is None


def status_of(msg: agent_pb2.NodeReport) -> cluster_pb2.NodeLoad:
    record = cluster_pb2.NodeRecord(node_id="n", address="127.0.0.1:1", pool="default")
    seen = ReportRecord(received_at_unix_ms=1_000, report=msg, stream_id="s")
    liveness = Liveness(default_interval_ms=250, timeout_intervals=3)
    return node_status(record, seen, 1_000, liveness).load


def test_the_load_entry_carries_residency_and_pressure_only_when_reported() -> None:
    msg = with_residency(evictions_per_s=50.0)
    msg.block_size, msg.kv_capacity_tokens = 16, 8_000
    load = status_of(msg)
    assert load.resident_blocks == 10 and load.evictions_per_s == 50.0
    assert load.eviction_pressure == pytest.approx(0.1)
    plain = status_of(report("n"))
    for field in ("resident_blocks", "evictions_per_s", "eviction_pressure"):
        assert not plain.HasField(field)


# -- planned keys ------------------------------------------------------------------------------


def test_an_anchor_is_the_last_block_of_the_samples_common_prefix() -> None:
    samples = [(1, [10, 11, 12, 13]), (1, [10, 11, 12, 99]), (1, [10, 11, 50]), (2, [20, 21])]
    samples += [(3, [30]), (3, [31])]  # nothing shared: no anchor
    assert prefix_anchors(samples) == {1: 11, 2: 20}
    assert prefix_anchors([(2, [20, 21, 22])], sizes={2: 2.4}) == {2: 21}
    assert prefix_anchors([(2, [20, 21, 22])], sizes={2: 9.0}) == {2: 22}
    assert prefix_anchors([(4, [])]) == {}


def test_watch_lists_hold_each_nodes_planned_keys_with_anchors_bounded() -> None:
    table = small_plan(nodes=3, keys=12)
    anchors = {int(k): int(k) ^ 0xFF for k in table.key_hashes}
    lists = watch_lists(table, anchors)
    for row, key in enumerate(table.key_hashes.tolist()):
        for member in table.members(row):
            assert (key, key ^ 0xFF) in lists[table.node_ids[member]]
    assert all(len(v) <= 2 for v in watch_lists(table, anchors, limit=2).values())
    assert watch_lists(table, {12345: 1}) == {}  # a key the plan does not hold


def test_collapsed_keys_count_only_reports_about_the_given_version() -> None:
    a, b, old = report("a"), report("b"), report("c")
    a.residency.watch_version = b.residency.watch_version = "p1"
    old.residency.watch_version = "p0"
    a.residency.absent_keys.extend([7, 8])
    b.residency.absent_keys.extend([7])
    old.residency.absent_keys.extend([9])
    assert collapsed_keys([a, b, old, report("d")], "p1") == {7: ["a", "b"], 8: ["a"]}
    assert collapsed_keys([a], "") == {}


def test_demote_zeroes_collapsed_keys_and_moves_their_rate_to_the_tail() -> None:
    rates, demoted, moved = demote([5, 7, 9], [1.0, 2.0, 0.0], {7: ["a"], 9: ["b"]})
    assert rates == [1.0, 0.0, 0.0] and demoted == [7] and moved == 2.0
