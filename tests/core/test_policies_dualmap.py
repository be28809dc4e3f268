"""DualMap-style: two ring candidates; the recent one wins unless load > 1.25 x other + 1."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.dualmap import DualMapPolicy
from dataplane.core.policies.ring import Ring, splitmix64

NODES = NodeSet([f"node-{i}" for i in range(8)])
RING = Ring(NODES)
KEY = hash_key("tenant-a")
ALL = [True] * 8
C1 = RING.first_eligible(KEY, ALL, [False] * 8)
C2 = RING.first_eligible(splitmix64(KEY), ALL, [False] * 8, exclude=C1)


def make_view(
    loads: dict[int, float] | None = None,
    healthy: Sequence[bool] | None = None,
    nodes: NodeSet = NODES,
) -> LoadView:
    view = LoadView(nodes)
    vector = [0.0] * len(nodes)
    for node, load in (loads or {}).items():
        vector[node] = load
    view.apply_snapshot(0.0, vector, healthy=healthy)
    return view


def served_by(policy: DualMapPolicy, node: int, view: LoadView) -> None:
    """Make ``node`` the key's most recent server."""
    policy.observe(Request(KEY), Decision(node, Reason.RING), view)


def test_dualmap_candidates_are_the_ring_homes_of_the_key_and_its_splitmix64() -> None:
    assert C1 != C2
    assert DualMapPolicy().candidates(KEY, make_view()) == (C1, C2)


@pytest.mark.parametrize(
    ("l1", "l2", "expected"),
    [(0, 0, "c1"), (3, 3, "c1"), (2, 1, "c2"), (1, 2, "c1"), (100, 99, "c2")],
)
def test_dualmap_without_history_takes_the_less_loaded_candidate_ties_to_c1(
    l1: float, l2: float, expected: str
) -> None:
    node = C1 if expected == "c1" else C2
    view = make_view({C1: l1, C2: l2})
    assert DualMapPolicy().choose(Request(KEY), view) == (node, Reason.RING)


@pytest.mark.parametrize(
    ("recent_load", "other_load", "reason"),
    [
        (0, 0, Reason.HISTORY),
        (1, 0, Reason.HISTORY),  # 1 <= 1.25 * 0 + 1: an idle pair stays sticky
        (2, 0, Reason.BALANCE),  # 2 > 1
        (6, 4, Reason.HISTORY),  # 6 <= 1.25 * 4 + 1 = 6: exactly at the cap
        (6.01, 4, Reason.BALANCE),  # just over
        (7, 4, Reason.BALANCE),
        (13, 10, Reason.HISTORY),  # 13 <= 13.5
        (14, 10, Reason.BALANCE),
    ],
)
@pytest.mark.parametrize("recent_is_c1", [True, False])
def test_dualmap_keeps_the_recent_candidate_unless_over_the_cap(
    recent_load: float, other_load: float, reason: Reason, recent_is_c1: bool
) -> None:
    recent, other = (C1, C2) if recent_is_c1 else (C2, C1)
    policy = DualMapPolicy()
    view = make_view({recent: recent_load, other: other_load})
    served_by(policy, recent, view)
    expected = recent if reason is Reason.HISTORY else other
    assert policy.choose(Request(KEY), view) == (expected, reason)


def test_dualmap_route_records_history_so_the_key_sticks_to_its_last_server() -> None:
    policy = DualMapPolicy()
    view = make_view({C1: 5.0})
    assert policy.route(Request(KEY), view, now=0.0) == (C2, Reason.RING)
    view.apply_snapshot(1.0, [0.0] * 8)  # C1 is now the lighter, yet C2 served the key last
    assert policy.choose(Request(KEY), view) == (C2, Reason.HISTORY)


def test_dualmap_history_on_a_non_candidate_counts_as_none() -> None:
    policy = DualMapPolicy()
    view = make_view({C1: 1.0})
    stranger = next(n for n in range(8) if n not in (C1, C2))
    served_by(policy, stranger, view)
    assert policy.choose(Request(KEY), view) == (C2, Reason.RING)


def test_dualmap_with_one_eligible_node_uses_it() -> None:
    policy = DualMapPolicy()
    healthy = [node == C1 for node in range(8)]
    view = make_view(healthy=healthy)
    assert policy.choose(Request(KEY), view) == (C1, Reason.RING)
    served_by(policy, C1, view)
    assert policy.choose(Request(KEY), view) == (C1, Reason.HISTORY)


def test_dualmap_skips_an_unhealthy_candidate() -> None:
    policy = DualMapPolicy()
    view = make_view(healthy=[node != C1 for node in range(8)])
    c1, c2 = policy.candidates(KEY, view)
    assert C1 not in (c1, c2)
    assert policy.choose(Request(KEY), view).node in (c1, c2)


def test_dualmap_forgets_the_least_recently_served_key_past_max_keys() -> None:
    policy = DualMapPolicy(max_keys=2)
    view = make_view()
    for key in (1, 2, 1, 3):  # key 2 is the least recently served when key 3 arrives
        policy.observe(Request(key), Decision(0, Reason.RING), view)
    assert policy.recent(1, view) == 0
    assert policy.recent(2, view) == -1
    assert policy.recent(3, view) == 0


def test_dualmap_history_survives_a_membership_change_by_node_id() -> None:
    policy = DualMapPolicy()
    served_by(policy, C2, make_view())
    grown = NodeSet([*NODES.ids, "node-8"])
    assert policy.recent(KEY, make_view(nodes=grown)) == grown.index[NODES.ids[C2]]
    gone = NodeSet([n for n in NODES.ids if n != NODES.ids[C2]])
    assert policy.recent(KEY, make_view(nodes=gone)) == -1


def test_dualmap_rejects_a_cap_below_one() -> None:
    with pytest.raises(ValueError, match="cap"):
        DualMapPolicy(cap=0.5)


def test_dualmap_raises_when_no_node_is_eligible() -> None:
    with pytest.raises(NoEligibleNodeError):
        DualMapPolicy().choose(Request(KEY), make_view(healthy=[False] * 8))
