"""Plan diff: counts and churn against a brute-force comparison of key → node-id sets."""

from __future__ import annotations

import numpy as np

from controlplane.core.plan_diff import diff_plans, set_signatures
from dataplane.core.keys import hash_key
from dataplane.core.table import PlannerParams, RoutingTable, make_table
from tests.support.factories import small_plan


def key_sets(table: RoutingTable) -> dict[int, frozenset[str]]:
    return {
        int(h): frozenset(table.destination_ids(int(h)) or []) for h in table.key_hashes.tolist()
    }


def test_counts_and_churn_match_a_brute_force_comparison() -> None:
    old, new = small_plan(seed=1, keys=60), small_plan(seed=2, keys=60, nodes=5)
    diff = diff_plans(old, new, limit=1000)
    a, b = key_sets(old), key_sets(new)
    common = a.keys() & b.keys()
    unchanged = sum(1 for k in common if a[k] == b[k])
    assert diff.keys_unchanged == unchanged
    assert diff.keys_moved == len(common) - unchanged
    assert diff.keys_added == len(b.keys() - a.keys())
    assert diff.keys_removed == len(a.keys() - b.keys())
    assert diff.churn == 1 - unchanged / len(a.keys() | b.keys())
    assert {m.key_hash for m in diff.moves} == {k for k in common if a[k] != b[k]}
    for move in diff.moves:
        assert frozenset(move.from_node_ids) == a[move.key_hash]
        assert frozenset(move.to_node_ids) == b[move.key_hash]


def table(nodes: list[str], sets: list[list[int]]) -> RoutingTable:
    """Keys k0..k{n-1} (sorted by hash) with the given member indices."""
    hashes = np.sort(np.array([hash_key(f"k{i}") for i in range(len(sets))], dtype=np.uint64))
    offsets = np.cumsum([0] + [len(m) for m in sets]).astype(np.uint32)
    members = np.array([i for m in sets for i in sorted(m)], dtype=np.uint16)
    return make_table(
        pool="default",
        node_ids=nodes,
        key_hashes=hashes,
        set_offsets=offsets,
        set_members=members,
        params=PlannerParams(q_cap=1.0, slots_per_node=4),
        created_at_unix_ms=0,
    )


def test_sets_are_compared_by_node_id_not_by_index() -> None:
    old = table(["a", "b", "c"], [[0, 1], [2], [0]])  # {a,b} {c} {a}
    new = table(["c", "b", "a"], [[1, 2], [1], [2]])  # {b,a} {b} {a}
    diff = diff_plans(old, new, limit=10)
    assert (diff.keys_unchanged, diff.keys_moved) == (2, 1)
    assert diff.churn == 1 - 2 / 3
    (move,) = diff.moves
    assert (list(move.from_node_ids), list(move.to_node_ids)) == (["c"], ["b"])
    assert len(set(set_signatures(old).tolist())) == 3


def test_moves_list_the_highest_rate_keys_first_and_respect_the_limit() -> None:
    old, new = small_plan(seed=3, keys=80), small_plan(seed=4, keys=80, nodes=3)
    diff = diff_plans(old, new, limit=3)
    assert len(diff.moves) == min(3, diff.keys_moved)
    rates = {k.key_hash: k.rate for t in (old, new) for k in t.top_keys}
    listed = [max(rates.get(m.key_hash, 0), 0) for m in diff.moves]
    assert listed == sorted(listed, reverse=True)
    assert all(m.key.startswith("key-") for m in diff.moves)


def test_empty_plans_have_zero_churn() -> None:
    empty = small_plan(slots_per_node=0)
    diff = diff_plans(empty, empty, limit=5)
    assert (diff.keys_from, diff.keys_to, diff.churn) == (0, 0, 0.0)
