"""Flat-LB: power-of-two choices over eligible nodes, blind to keys."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.flat import FlatPolicy


def make_view(
    loads: Sequence[float],
    healthy: Sequence[bool] | None = None,
    draining: Sequence[bool] | None = None,
) -> LoadView:
    view = LoadView(NodeSet([f"n{i}" for i in range(len(loads))]))
    view.apply_snapshot(0.0, loads, healthy=healthy, draining=draining)
    return view


@pytest.mark.parametrize(
    ("loads", "healthy", "expected"),
    [
        ([3.0, 1.0], None, 1),  # two eligible nodes: p2c compares both, the lighter wins
        ([1.0, 3.0], None, 0),
        ([0.0, 9.0, 2.0], [False, True, True], 2),  # the unhealthy idle node is never drawn
        ([5.0, 0.0, 0.0], [True, False, False], 0),  # the only eligible node, whatever its load
    ],
)
def test_flat_picks_the_lighter_of_two_eligible_nodes(
    loads: list[float], healthy: list[bool] | None, expected: int
) -> None:
    policy = FlatPolicy(seed=1)
    view = make_view(loads, healthy)
    for key in range(20):
        assert policy.choose(Request(key), view) == (expected, Reason.P2C)


def test_flat_ignores_the_key_and_spreads_equal_loads() -> None:
    policy = FlatPolicy(seed=3)
    view = make_view([0.0] * 10)
    chosen = {policy.choose(Request(42), view).node for _ in range(200)}
    assert len(chosen) >= 8  # one key, many nodes: cache-blind by design


def test_flat_never_picks_the_heaviest_of_several_nodes() -> None:
    policy = FlatPolicy(seed=5)
    view = make_view([1.0, 2.0, 3.0, 9.0])
    assert all(policy.choose(Request(k), view).node != 3 for k in range(200))


def test_flat_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        FlatPolicy().choose(Request(1), make_view([0.0, 0.0], draining=[True, True]))
