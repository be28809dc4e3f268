"""Preble-style: exploit the longest-prefix holder while load + 1 <= 1.5 (min load + 1)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.preble import PreblePolicy

NODES = NodeSet([f"n{i}" for i in range(4)])
PREFIX = tuple(range(100, 175))  # 75 blocks


def make_view(
    loads: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    healthy: Sequence[bool] | None = None,
    nodes: NodeSet = NODES,
) -> LoadView:
    view = LoadView(nodes)
    view.apply_snapshot(0.0, loads, healthy=healthy)
    return view


def served(policy: PreblePolicy, node: int, blocks: tuple[int, ...], view: LoadView) -> None:
    policy.observe(Request(0, blocks), Decision(node, Reason.EXPLORE), view)


def test_preble_explores_to_the_least_loaded_node_when_nothing_matches() -> None:
    view = make_view([3.0, 1.0, 2.0, 4.0])
    assert PreblePolicy().choose(Request(1, PREFIX), view) == (1, Reason.EXPLORE)


@pytest.mark.parametrize(
    ("candidate_load", "min_load", "reason"),
    [
        (0.0, 0.0, Reason.HISTORY),
        (0.5, 0.0, Reason.HISTORY),  # 1.5 <= 1.5 * 1: exactly at the cap
        (0.51, 0.0, Reason.EXPLORE),  # just over
        (1.0, 0.0, Reason.EXPLORE),
        (2.0, 1.0, Reason.HISTORY),  # 3 <= 1.5 * 2 = 3: exactly at the cap
        (2.01, 1.0, Reason.EXPLORE),
        (5.0, 3.0, Reason.HISTORY),  # 6 <= 1.5 * 4 = 6
        (6.0, 3.0, Reason.EXPLORE),
        (29.0, 19.0, Reason.HISTORY),  # 30 <= 30
        (29.5, 19.0, Reason.EXPLORE),
    ],
)
def test_preble_exploits_the_holder_only_within_the_load_cap(
    candidate_load: float, min_load: float, reason: Reason
) -> None:
    policy = PreblePolicy()
    loads = [candidate_load, min_load, min_load + 10, min_load + 10]
    view = make_view(loads)
    served(policy, 0, PREFIX, view)
    expected = 0 if reason is Reason.HISTORY else 1
    assert policy.choose(Request(1, PREFIX), view) == (expected, reason)


def test_preble_prefers_the_longest_matched_prefix() -> None:
    policy = PreblePolicy()
    view = make_view([0.5, 1.0, 1.0, 1.0])  # the shorter holder is lighter; depth still wins
    served(policy, 0, PREFIX[:10], view)
    served(policy, 1, PREFIX[:40], view)
    assert policy.choose(Request(1, PREFIX), view) == (1, Reason.HISTORY)


@pytest.mark.parametrize(
    ("loads", "expected"),
    [([1.0, 0.0, 0.0, 0.0], 2), ([0.0, 0.0, 0.0, 0.0], 0), ([0.0, 0.0, 1.0, 0.0], 0)],
)
def test_preble_breaks_equal_depth_ties_by_load_then_index(
    loads: list[float], expected: int
) -> None:
    policy = PreblePolicy()
    view = make_view(loads)
    served(policy, 0, PREFIX, view)
    served(policy, 2, PREFIX, view)
    assert policy.choose(Request(1, PREFIX), view) == (expected, Reason.HISTORY)


def test_preble_ignores_history_on_an_ineligible_node() -> None:
    policy = PreblePolicy()
    view = make_view([0.0, 1.0, 1.0, 1.0], healthy=[False, True, True, True])
    served(policy, 0, PREFIX, view)
    served(policy, 2, PREFIX[:5], view)
    assert policy.choose(Request(1, PREFIX), view) == (2, Reason.HISTORY)


def test_preble_route_records_the_chosen_node_so_the_prefix_returns_to_it() -> None:
    policy = PreblePolicy()
    view = make_view([2.0, 2.0, 0.0, 2.0])
    assert policy.route(Request(1, PREFIX), view, now=0.0) == (2, Reason.EXPLORE)
    assert policy.choose(Request(1, PREFIX[:30]), view) == (2, Reason.HISTORY)


def test_preble_uses_the_key_hash_as_a_one_block_prefix_without_blocks() -> None:
    policy = PreblePolicy()
    view = make_view([1.0, 0.0, 1.0, 1.0])
    assert policy.route(Request(77), view, now=0.0) == (1, Reason.EXPLORE)
    view.apply_snapshot(1.0, [0.0, 0.0, 0.0, 0.0])
    assert policy.choose(Request(77), view) == (1, Reason.HISTORY)
    assert policy.choose(Request(78), view).reason is Reason.EXPLORE


def test_preble_explore_ties_are_random_but_seeded() -> None:
    view = make_view()
    policies = [PreblePolicy(seed=seed) for seed in (1, 1, 2)]
    runs = [[policy.choose(Request(k, (k,)), view).node for k in range(40)] for policy in policies]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert len(set(runs[0])) == 4


def test_preble_forgets_history_on_a_membership_change() -> None:
    policy = PreblePolicy()
    served(policy, 0, PREFIX, make_view())
    renewed = NodeSet(NODES.ids)
    assert policy.choose(Request(1, PREFIX), make_view(nodes=renewed)).reason is Reason.EXPLORE


def test_preble_rejects_a_cap_below_one() -> None:
    with pytest.raises(ValueError, match="cap"):
        PreblePolicy(cap=0.9)


def test_preble_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        PreblePolicy().choose(Request(1, PREFIX), make_view(healthy=[False] * 4))
