"""`cachectl status`'s residency table: shown only for nodes that report KV events."""

from __future__ import annotations

import pytest

from cachectl.residency_view import print_residency, residency_rows
from cacheroute.v1 import admin_pb2, cluster_pb2


def status(node: str, **load: float) -> admin_pb2.NodeStatus:
    return admin_pb2.NodeStatus(
        record=cluster_pb2.NodeRecord(node_id=node),
        load=cluster_pb2.NodeLoad(node_id=node, **load),  # type: ignore[arg-type]
        planned_keys_watched=3,
        planned_keys_not_resident=1,
    )


def test_only_nodes_with_residency_get_a_row_and_unknown_pressure_shows_a_dash() -> None:
    with_pressure = status("a", resident_blocks=40, evictions_per_s=12.5, eviction_pressure=0.01)
    rows = residency_rows([with_pressure, status("b"), status("c", resident_blocks=0)])
    assert rows == [["a", 40, "12.5", "0.0100", 3, 1], ["c", 0, "0.0", "-", 3, 1]]


def test_no_table_without_any_residency(capsys: pytest.CaptureFixture[str]) -> None:
    print_residency([status("b")])
    assert capsys.readouterr().out == ""
    print_residency([status("a", resident_blocks=7)])
    out = capsys.readouterr().out
    assert "KV-cache residency" in out and "NOT_RESIDENT" in out
