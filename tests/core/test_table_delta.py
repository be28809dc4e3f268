"""Table deltas: applying the diff of two tables to the first gives exactly the second."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.table import PlannerParams, RoutingTable, TableError, make_table
from dataplane.core.table_delta import apply_delta, diff_tables, segment_positions
from dataplane.core.table_delta_codec import decode_delta, encode_delta


@st.composite
def tables(draw: st.DrawFn, ids: list[str]) -> RoutingTable:
    """A random valid table over some of ``ids`` (order shuffled) and keys 0..59."""
    node_ids = draw(st.permutations(ids).map(lambda p: p[: max(1, len(p) - 1)]))
    keys = sorted(draw(st.sets(st.integers(0, 59), max_size=40)))
    sets = [
        sorted(draw(st.sets(st.integers(0, len(node_ids) - 1), min_size=1, max_size=3)))
        for _ in keys
    ]
    offsets = np.cumsum([0] + [len(s) for s in sets]).astype(np.uint32)
    return make_table(
        pool="default", node_ids=node_ids, key_hashes=np.array(keys, dtype=np.uint64),
        set_offsets=offsets, set_members=np.array([m for s in sets for m in s], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=4, seed=draw(st.integers(0, 3))),
        created_at_unix_ms=draw(st.integers(0, 10)),
    )  # fmt: skip


def same(a: RoutingTable, b: RoutingTable) -> bool:
    return (
        a.version == b.version and a.node_ids == b.node_ids
        and np.array_equal(a.key_hashes, b.key_hashes)
        and np.array_equal(a.set_offsets, b.set_offsets)
        and np.array_equal(a.set_members, b.set_members)
        and a.params == b.params and a.created_at_unix_ms == b.created_at_unix_ms
    )  # fmt: skip


IDS = ["a", "b", "c", "d", "e"]


@settings(max_examples=300, deadline=None)
@given(base=tables(IDS), target=tables(IDS))
def test_a_delta_turns_its_base_into_exactly_the_target(
    base: RoutingTable, target: RoutingTable
) -> None:
    delta = decode_delta(encode_delta(diff_tables(base, target)))
    assert same(apply_delta(base, delta), target)


@settings(max_examples=100, deadline=None)
@given(table=tables(IDS))
def test_the_delta_of_a_table_to_itself_holds_no_row(table: RoutingTable) -> None:
    delta = diff_tables(table, table)
    assert delta.target.num_keys == 0 and delta.removed.shape[0] == 0
    assert same(apply_delta(table, delta), table)


def base_and_target() -> tuple[RoutingTable, RoutingTable]:
    hashes = np.arange(1, 1001, dtype=np.uint64)
    offsets = np.arange(1001, dtype=np.uint32)
    members = (np.arange(1000) % 3).astype(np.uint16)
    params = PlannerParams(q_cap=1.0, slots_per_node=4)
    base = make_table(
        pool="default", node_ids=["a", "b", "c"], key_hashes=hashes, set_offsets=offsets,
        set_members=members, params=params, created_at_unix_ms=1,
    )  # fmt: skip
    moved = members.copy()
    moved[::20] = (moved[::20] + 1) % 3  # 5% of the keys move
    target = make_table(
        pool="default", node_ids=["a", "b", "c"], key_hashes=hashes, set_offsets=offsets,
        set_members=moved, params=params, created_at_unix_ms=2,
    )  # fmt: skip
    return base, target


def test_a_delta_carries_only_the_rows_that_moved() -> None:
    base, target = base_and_target()
    delta = diff_tables(base, target)
    assert delta.target.num_keys == 50
    assert delta.target.key_hashes.tolist() == list(range(1, 1001, 20))


def test_a_delta_against_another_base_is_refused() -> None:
    base, target = base_and_target()
    delta = diff_tables(base, target)
    with pytest.raises(TableError, match="delta is against"):
        apply_delta(target, delta)


def test_a_tampered_delta_fails_the_content_hash() -> None:
    base, target = base_and_target()
    delta = diff_tables(base, target)
    members = delta.target.set_members.copy()
    members[0] = (members[0] + 1) % 3
    forged = dataclasses.replace(
        delta, target=dataclasses.replace(delta.target, set_members=members)
    )
    with pytest.raises(TableError, match="content hash mismatch"):
        apply_delta(base, forged)


def test_a_delta_that_removes_an_unknown_key_is_refused() -> None:
    base, target = base_and_target()
    delta = diff_tables(base, target)
    forged = dataclasses.replace(delta, removed=np.array([5000], dtype=np.uint64))
    with pytest.raises(TableError, match="removes a key the base does not hold"):
        apply_delta(base, forged)


def test_bytes_that_are_no_delta_are_refused() -> None:
    with pytest.raises(TableError, match="not a TableDelta"):
        decode_delta(b"\xff\xff\xff")


def test_segment_positions_concatenates_ranges() -> None:
    starts = np.array([5, 0, 9], dtype=np.int64)
    lengths = np.array([2, 0, 3], dtype=np.int64)
    assert segment_positions(starts, lengths).tolist() == [5, 6, 9, 10, 11]
