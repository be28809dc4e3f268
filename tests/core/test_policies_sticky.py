"""Sticky: a key's home is the first eligible node clockwise on the ring; load is ignored."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.ring import Ring
from dataplane.core.policies.sticky import StickyPolicy

NODES = NodeSet([f"node-{i}" for i in range(8)])
RING = Ring(NODES)
KEY = hash_key("tenant-a")
WALK = list(RING.walk(KEY))  # the key's nodes in clockwise order


def make_view(
    loads: Sequence[float] | None = None,
    healthy: Sequence[bool] | None = None,
    draining: Sequence[bool] | None = None,
) -> LoadView:
    view = LoadView(NODES)
    view.apply_snapshot(0.0, loads or [0.0] * 8, healthy=healthy, draining=draining)
    return view


def test_sticky_sends_a_key_to_its_ring_owner() -> None:
    assert StickyPolicy().choose(Request(KEY), make_view()) == (WALK[0], Reason.RING)


@pytest.mark.parametrize(
    "loads",
    [
        [0.0] * 8,
        [float(i) for i in range(8)],
        [100.0 if i == WALK[0] else 0.0 for i in range(8)],  # even a swamped home keeps the key
    ],
)
def test_sticky_key_stays_on_its_home_whatever_the_loads(loads: list[float]) -> None:
    policy = StickyPolicy()
    view = make_view(loads)
    assert {policy.choose(Request(KEY), view).node for _ in range(10)} == {WALK[0]}


@pytest.mark.parametrize(
    ("unhealthy", "drained", "expected"),
    [
        ([WALK[0]], [], WALK[1]),
        ([], [WALK[0]], WALK[1]),
        ([WALK[0]], [WALK[1]], WALK[2]),
        ([WALK[0], WALK[1], WALK[2]], [], WALK[3]),
    ],
)
def test_sticky_skips_ineligible_nodes_clockwise(
    unhealthy: list[int], drained: list[int], expected: int
) -> None:
    view = make_view(
        healthy=[i not in unhealthy for i in range(8)], draining=[i in drained for i in range(8)]
    )
    assert StickyPolicy().choose(Request(KEY), view) == (expected, Reason.RING)


def test_sticky_key_returns_home_when_its_node_recovers() -> None:
    policy = StickyPolicy()
    view = make_view(healthy=[i != WALK[0] for i in range(8)])
    assert policy.choose(Request(KEY), view).node == WALK[1]
    view.set_states(healthy=[True] * 8)
    assert policy.choose(Request(KEY), view).node == WALK[0]


def test_sticky_spreads_many_keys_over_all_nodes() -> None:
    policy = StickyPolicy()
    view = make_view()
    counts = [0] * 8
    for i in range(4000):
        counts[policy.choose(Request(hash_key(f"k{i}")), view).node] += 1
    assert min(counts) > 0.6 * 500
    assert max(counts) < 1.4 * 500


def test_sticky_follows_a_membership_change() -> None:
    policy = StickyPolicy()
    assert policy.choose(Request(KEY), make_view()).node == WALK[0]
    smaller = NodeSet([n for n in NODES.ids if n != NODES.ids[WALK[0]]])
    view = LoadView(smaller)
    node = policy.choose(Request(KEY), view).node
    assert smaller.ids[node] == NODES.ids[WALK[1]]  # the next node clockwise inherits the key


def test_sticky_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        StickyPolicy().choose(Request(KEY), make_view(healthy=[False] * 8))
