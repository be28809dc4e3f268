"""CHWBL: ring walk to the first node whose load + 1 stays within ceil(1.25 (total + 1) / n)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.chwbl import ChwblPolicy
from dataplane.core.policies.ring import Ring

NODES = NodeSet([f"node-{i}" for i in range(6)])
RING = Ring(NODES)
KEY = hash_key("tenant-a")
WALK = list(RING.walk(KEY))  # the key's nodes in clockwise order
POLICY = ChwblPolicy()


def make_view(
    loads: Sequence[float], healthy: Sequence[bool] | None = None, nodes: NodeSet = NODES
) -> LoadView:
    view = LoadView(nodes)
    view.apply_snapshot(0.0, loads, healthy=healthy)
    return view


def by_walk(walk_loads: Sequence[float]) -> list[float]:
    """Loads given in the key's clockwise order, laid out by node index."""
    loads = [0.0] * len(NODES)
    for position, load in enumerate(walk_loads):
        loads[WALK[position]] = load
    return loads


@pytest.mark.parametrize(
    ("loads", "healthy", "bound"),
    [
        ([0, 0, 0, 0, 0, 0], None, 1),  # ceil(1.25 * 1 / 6)
        ([3, 1, 0, 0, 0, 0], None, 2),  # ceil(1.25 * 5 / 6) = ceil(1.04)
        ([5, 5, 5, 5, 5, 5], None, 7),  # ceil(1.25 * 31 / 6) = ceil(6.46)
        ([10, 0, 0, 0, 0, 0], None, 3),  # ceil(1.25 * 11 / 6) = ceil(2.29)
        ([7, 0, 0, 0, 0, 0], None, 2),  # ceil(1.25 * 8 / 6) = ceil(1.67)
        ([9, 9, 9, 0, 0, 0], [True, True, True, False, False, False], 12),  # eligible only: 28 / 3
    ],
)
def test_chwbl_bound_is_ceil_of_one_plus_epsilon_times_total_plus_one_over_n(
    loads: list[float], healthy: list[bool] | None, bound: int
) -> None:
    assert POLICY.bound(make_view(loads, healthy)) == bound


@pytest.mark.parametrize(
    ("walk_loads", "position", "reason"),
    [
        ([0, 0, 0, 0, 0, 0], 0, Reason.RING),  # idle: the home qualifies
        ([1, 0, 0, 0, 0, 0], 1, Reason.RING_SPILL),  # bound ceil(1.25 * 2 / 6) = 1: 1 + 1 > 1
        ([1, 1, 1, 1, 1, 1], 0, Reason.RING),  # bound ceil(1.25 * 7 / 6) = 2: 1 + 1 = 2 (at it)
        ([2, 1, 1, 1, 0, 0], 1, Reason.RING_SPILL),  # bound ceil(1.25 * 6 / 6) = 2: 2 + 1 > 2
        ([2, 2, 1, 0, 0, 0], 2, Reason.RING_SPILL),  # bound 2: the first two are full
        ([4, 4, 4, 1, 1, 1], 3, Reason.RING_SPILL),  # bound ceil(1.25 * 16 / 6) = 4
        ([3, 4, 4, 1, 1, 1], 0, Reason.RING),  # bound ceil(1.25 * 15 / 6) = 4: 3 + 1 fits
        ([6, 6, 6, 6, 6, 5], 0, Reason.RING),  # bound ceil(1.25 * 36 / 6) = 8
    ],
)
def test_chwbl_walks_clockwise_to_the_first_node_within_the_bound(
    walk_loads: list[float], position: int, reason: Reason
) -> None:
    assert POLICY.choose(Request(KEY), make_view(by_walk(walk_loads))) == (WALK[position], reason)


def test_chwbl_home_is_the_first_eligible_node_so_skipping_an_unhealthy_owner_is_ring() -> None:
    healthy = [node != WALK[0] for node in range(6)]
    assert POLICY.choose(Request(KEY), make_view([0.0] * 6, healthy)) == (WALK[1], Reason.RING)


def test_chwbl_falls_back_to_least_loaded_when_fractional_loads_leave_no_node_qualifying() -> None:
    # 10 nodes at 0.5: bound = ceil(1.25 * 6 / 10) = 1 and every load + 1 = 1.5 > 1.
    nodes = NodeSet([f"node-{i}" for i in range(10)])
    walk = list(Ring(nodes).walk(KEY))
    loads = [0.5] * 10
    loads[walk[4]] = 0.25
    view = make_view(loads, nodes=nodes)
    assert POLICY.bound(view) == 1
    assert POLICY.choose(Request(KEY), view) == (walk[4], Reason.RING_SPILL)
    loads[walk[0]] = 0.1  # the least-loaded node is the home itself
    assert POLICY.choose(Request(KEY), make_view(loads, nodes=nodes)) == (walk[0], Reason.RING)


LOAD_VECTORS = [
    [0, 0, 0, 0, 0, 0],
    [50, 0, 0, 0, 0, 0],
    [9, 9, 9, 9, 9, 0],
    [1, 2, 3, 4, 5, 6],
    [100, 100, 100, 100, 100, 100],
    [13, 0, 7, 2, 2, 40],
]


@pytest.mark.parametrize("loads", LOAD_VECTORS)
def test_chwbl_chosen_load_plus_one_never_exceeds_the_bound(loads: list[float]) -> None:
    view = make_view(loads)
    bound = POLICY.bound(view)
    for i in range(300):
        node = POLICY.choose(Request(hash_key(f"k{i}")), view).node
        assert loads[node] + 1 <= bound


@settings(max_examples=150, deadline=None)
@given(
    loads=st.lists(st.integers(0, 60), min_size=6, max_size=6),
    healthy=st.lists(st.booleans(), min_size=6, max_size=6).filter(any),
    key=st.integers(0, 2**64 - 1),
)
def test_chwbl_bound_holds_for_any_integer_loads(
    loads: list[int], healthy: list[bool], key: int
) -> None:
    view = make_view([float(x) for x in loads], healthy)
    eligible = [i for i in range(6) if healthy[i]]
    bound = math.ceil(1.25 * (sum(loads[i] for i in eligible) + 1) / len(eligible))
    node = POLICY.choose(Request(key), view).node
    assert healthy[node]
    assert loads[node] + 1 <= bound


def test_chwbl_keeps_keys_home_while_the_cluster_is_balanced() -> None:
    view = make_view([3.0] * 6)  # bound ceil(1.25 * 19 / 6) = 4: every node qualifies
    reasons = {POLICY.choose(Request(hash_key(f"k{i}")), view).reason for i in range(200)}
    assert reasons == {Reason.RING}


def test_chwbl_rejects_a_negative_epsilon() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        ChwblPolicy(epsilon=-0.1)


def test_chwbl_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        POLICY.choose(Request(KEY), make_view([0.0] * 6, [False] * 6))
