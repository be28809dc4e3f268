"""Snapshot columns: the vectorised path applies exactly what the per-node path applies."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cacheroute.v1 import cluster_pb2
from dataplane.core.load_columns import encode_columns, membership_digest, read_columns
from dataplane.core.load_view import LoadView
from dataplane.core.router import Router
from tests.support.router_core import NOW_MS, NOW_S

node = st.tuples(
    st.floats(0, 50, allow_nan=False),
    st.booleans(),  # healthy
    st.booleans(),  # draining
    st.sampled_from([0, 2999, 3000, 3001, 9000]),  # report age in ms (the bound is 3000)
    st.booleans(),  # has an address of its own
)


def make(
    nodes: list[tuple[float, bool, bool, int, bool]], seq: int, *, ids: str = "n"
) -> cluster_pb2.LoadSnapshot:
    entries = [
        cluster_pb2.NodeLoad(
            node_id=f"{ids}{i}", address=f"{ids}{i}.svc:8000" if own else "", load=load,
            healthy=healthy, draining=draining, age_ms=age,
        )
        for i, (load, healthy, draining, age, own) in enumerate(nodes)
    ]  # fmt: skip
    return cluster_pb2.LoadSnapshot(
        pool="default", seq=seq, leader_term=1, observed_at_unix_ms=NOW_MS, nodes=entries
    )


def with_columns(snapshot: cluster_pb2.LoadSnapshot) -> cluster_pb2.LoadSnapshot:
    out = copy.deepcopy(snapshot)
    out.columns.CopyFrom(encode_columns(list(snapshot.nodes)))
    return out


def state_of(view: LoadView) -> tuple[object, ...]:
    return (
        view.nodes.ids, view.nodes.addresses, view.loads, view.healthy, view.reported_healthy,
        view.draining, view.eligible_nodes, view.panic, view.all_eligible,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(node, max_size=12),
    second=st.lists(node, max_size=12),
    decisions=st.lists(st.integers(0, 11), max_size=20),
    ejected=st.sets(st.integers(0, 11), max_size=3),
)
def test_columns_and_entries_give_the_same_view(
    first: list[tuple[float, bool, bool, int, bool]],
    second: list[tuple[float, bool, bool, int, bool]],
    decisions: list[int],
    ejected: set[int],
) -> None:
    by_entries, by_columns = Router(), Router()
    for seq, nodes in enumerate((first, second), start=1):
        plain = make(nodes, seq)
        assert by_entries.apply_load(plain, now=NOW_S)
        assert by_columns.apply_load(with_columns(plain), now=NOW_S)
        for router in (by_entries, by_columns):
            view = router.pools["default"].view
            for index in decisions:
                if index < len(view.nodes):
                    view.record(index, NOW_S + 0.1)
            view.set_ejected(frozenset(i for i in ejected if i < len(view.nodes)))
        assert state_of(by_columns.pools["default"].view) == state_of(
            by_entries.pools["default"].view
        )


def test_the_same_membership_keeps_the_view_and_its_eligible_tuple() -> None:
    router = Router()
    nodes = [(1.0, True, False, 0, True), (2.0, True, False, 0, True)]
    router.apply_load(with_columns(make(nodes, 1)), now=NOW_S)
    view = router.pools["default"].view
    eligible = view.eligible_nodes
    router.apply_load(with_columns(make([(5.0, *n[1:]) for n in nodes], 2)), now=NOW_S)
    assert router.pools["default"].view is view
    assert view.eligible_nodes is eligible  # policies' cached derivations stay valid
    assert view.loads == [5.0, 5.0]


def test_columns_that_lie_about_their_nodes_are_rejected_unapplied() -> None:
    router = Router()
    honest = with_columns(make([(1.0, True, False, 0, True)], 1))
    router.apply_load(honest, now=NOW_S)
    forged = with_columns(make([(9.0, True, False, 0, True)] * 2, 2, ids="x"))
    forged.columns.membership = membership_digest(["n0"], ["n0.svc:8000"])
    with pytest.raises(ValueError, match="membership does not match"):
        router.apply_load(forged, now=NOW_S)
    assert router.pools["default"].view.nodes.ids == ("n0",)
    assert router.pools["default"].load_order == (1, 1)


@pytest.mark.parametrize("field", ["load", "flags", "age_ms"])
def test_a_column_of_the_wrong_length_is_rejected(field: str) -> None:
    snapshot = with_columns(make([(1.0, True, False, 0, True)] * 3, 1))
    setattr(snapshot.columns, field, getattr(snapshot.columns, field)[:-1])
    with pytest.raises(ValueError, match=f"columns.{field} is"):
        Router().apply_load(snapshot, now=NOW_S)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_bad_load_in_the_columns_names_its_node(bad: float) -> None:
    snapshot = with_columns(make([(1.0, True, False, 0, True)] * 3, 1))
    loads = np.frombuffer(snapshot.columns.load, dtype="<f8").copy()
    loads[2] = bad
    snapshot.columns.load = loads.tobytes()
    with pytest.raises(ValueError, match="node 'n2' has load"):
        Router().apply_load(snapshot, now=NOW_S)


def test_a_snapshot_without_columns_reads_none() -> None:
    assert read_columns(make([(1.0, True, False, 0, True)], 1)) is None
