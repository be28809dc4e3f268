"""SGLang cache-aware: balance when (max - min > 64 and max > 1.5 min), else match rate > 0.3."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.sglang import SGLangPolicy

NODES = NodeSet([f"n{i}" for i in range(4)])
PREFIX = tuple(range(100, 110))  # 10 blocks: a match of k blocks is a rate of k / 10


def make_view(
    loads: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    healthy: Sequence[bool] | None = None,
    nodes: NodeSet = NODES,
) -> LoadView:
    view = LoadView(nodes)
    view.apply_snapshot(0.0, loads, healthy=healthy)
    return view


def served(policy: SGLangPolicy, node: int, blocks: tuple[int, ...], view: LoadView) -> None:
    policy.observe(Request(0, blocks), Decision(node, Reason.CACHE_MISS), view)


def test_sglang_defaults_are_the_sgl_router_launch_defaults() -> None:
    policy = SGLangPolicy()
    assert policy.cache_threshold == 0.3
    assert policy.balance_abs_threshold == 64
    assert policy.balance_rel_threshold == 1.5
    assert policy.max_blocks_per_node == 2**26 // 64


@pytest.mark.parametrize(
    ("loads", "balance"),
    [
        ([0, 65, 10, 10], True),  # 65 > 64 and 65 > 0
        ([0, 64, 10, 10], False),  # 64 is not > 64
        ([100, 165, 120, 120], True),  # 65 > 64 and 165 > 150
        ([100, 150, 120, 120], False),  # 50 <= 64
        ([200, 265, 220, 220], False),  # 65 > 64 but 265 <= 300
        ([200, 301, 220, 220], True),  # 101 > 64 and 301 > 300
    ],
)
def test_sglang_balances_only_when_both_thresholds_are_exceeded(
    loads: list[float], balance: bool
) -> None:
    policy = SGLangPolicy()
    view = make_view(loads)
    served(policy, 1, PREFIX, view)  # the heavy node holds the whole prefix
    decision = policy.choose(Request(1, PREFIX), view)
    if balance:
        assert decision == (loads.index(min(loads)), Reason.BALANCE)
    else:
        assert decision == (1, Reason.CACHE_MATCH)


def test_sglang_balance_ties_go_to_the_lowest_index() -> None:
    view = make_view([100.0, 0.0, 0.0, 0.0])
    assert SGLangPolicy().choose(Request(1, PREFIX), view) == (1, Reason.BALANCE)


def test_sglang_imbalance_is_judged_over_eligible_nodes_only() -> None:
    view = make_view([0.0, 100.0, 90.0, 90.0], healthy=[False, True, True, True])
    assert SGLangPolicy().choose(Request(1, PREFIX), view).reason is Reason.CACHE_MISS


@pytest.mark.parametrize(
    ("shared", "reason"),
    [
        (10, Reason.CACHE_MATCH),
        (4, Reason.CACHE_MATCH),
        (3, Reason.CACHE_MISS),
        (0, Reason.CACHE_MISS),
    ],
)
def test_sglang_follows_the_cache_only_above_the_match_threshold(
    shared: int, reason: Reason
) -> None:
    policy = SGLangPolicy()
    view = make_view()
    served(policy, 2, PREFIX, view)
    request = Request(1, PREFIX[:shared] + tuple(range(900, 900 + 10 - shared)))
    decision = policy.choose(request, view)
    assert decision.reason is reason
    assert (decision.node == 2) is (reason is Reason.CACHE_MATCH)  # a miss avoids the big tree


@pytest.mark.parametrize(
    ("loads", "expected"),
    [([0, 0, 0, 0], 1), ([0, 3, 2, 2], 2), ([0, 3, 3, 0], 3), ([9, 0, 0, 0], 1)],
)
def test_sglang_miss_goes_to_the_smallest_tree_then_least_loaded_then_lowest_index(
    loads: list[float], expected: int
) -> None:
    policy = SGLangPolicy()
    view = make_view(loads)
    served(policy, 0, (1, 2, 3), view)
    served(policy, 1, (4,), view)
    served(policy, 2, (5,), view)
    served(policy, 3, (6,), view)  # trees: 3, 1, 1, 1 blocks
    assert policy.choose(Request(9, (7, 8)), view) == (expected, Reason.CACHE_MISS)


def test_sglang_match_ties_go_to_the_least_loaded_holder() -> None:
    policy = SGLangPolicy()
    view = make_view([0.0, 5.0, 4.0, 0.0])
    served(policy, 1, PREFIX, view)
    served(policy, 2, PREFIX, view)
    assert policy.choose(Request(1, PREFIX), view) == (2, Reason.CACHE_MATCH)


def test_sglang_records_the_chosen_node_even_when_balancing() -> None:
    policy = SGLangPolicy()
    view = make_view([100.0, 0.0, 100.0, 100.0])
    assert policy.route(Request(1, PREFIX), view, now=0.0) == (1, Reason.BALANCE)
    view.apply_snapshot(1.0, [0.0] * 4)
    assert policy.choose(Request(1, PREFIX), view) == (1, Reason.CACHE_MATCH)


def test_sglang_matches_only_eligible_holders() -> None:
    policy = SGLangPolicy()
    view = make_view(healthy=[True, True, False, True])
    served(policy, 2, PREFIX, view)
    assert policy.choose(Request(1, PREFIX), view).reason is Reason.CACHE_MISS


def test_sglang_uses_the_key_hash_as_a_one_block_prefix_without_blocks() -> None:
    policy = SGLangPolicy()
    view = make_view()
    first = policy.route(Request(55), view, now=0.0)
    assert first.reason is Reason.CACHE_MISS
    assert policy.choose(Request(55), view) == (first.node, Reason.CACHE_MATCH)


def test_sglang_forgets_history_on_a_membership_change() -> None:
    policy = SGLangPolicy()
    served(policy, 2, PREFIX, make_view())
    renewed = NodeSet(NODES.ids)
    assert policy.choose(Request(1, PREFIX), make_view(nodes=renewed)).reason is Reason.CACHE_MISS


def test_sglang_rejects_a_threshold_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="cache_threshold"):
        SGLangPolicy(cache_threshold=1.5)


def test_sglang_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        SGLangPolicy().choose(Request(1, PREFIX), make_view(healthy=[False] * 4))
