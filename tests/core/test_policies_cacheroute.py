"""CacheRoute dispatch: warm keys to the least-loaded eligible member, the rest by p2c."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet, bind_with_memo
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.cacheroute import (
    AffinityOnlyPolicy,
    CacheRoutePolicy,
    ReplicateRandomPolicy,
)
from dataplane.core.table import PlannerParams, RoutingTable, make_table

NODES = NodeSet(["n0", "n1", "n2", "n3"])
# The table was planned when "gone" was a member; n3 joined later and holds no warm key.
TABLE_NODES = ("n0", "n1", "n2", "gone")
K_SET = 10  # members n0, n1, n2
K_HALF_GONE = 20  # members n1, gone
K_GONE = 30  # member gone only
K_UNKNOWN = 40


def table() -> RoutingTable:
    sets = {K_SET: [0, 1, 2], K_HALF_GONE: [1, 3], K_GONE: [3]}
    keys = sorted(sets)
    offsets = np.cumsum([0] + [len(sets[k]) for k in keys])
    return make_table(
        pool="test",
        node_ids=TABLE_NODES,
        key_hashes=np.array(keys, dtype=np.uint64),
        set_offsets=offsets.astype(np.uint32),
        set_members=np.array([m for k in keys for m in sets[k]], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=2),
        created_at_unix_ms=0,
    )


TABLE = table()


def make_view(
    loads: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    *,
    healthy: Sequence[bool] | None = None,
    draining: Sequence[bool] | None = None,
    with_table: bool = True,
) -> LoadView:
    view = LoadView(NODES, table=TABLE if with_table else None)
    view.apply_snapshot(0.0, loads, healthy=healthy, draining=draining)
    return view


@pytest.mark.parametrize(
    ("key", "loads", "healthy", "draining", "expected"),
    [
        # warm: the least-loaded member, even though non-member n3 is idle
        (K_SET, [5, 2, 7, 0], None, None, (1, Reason.WARM)),
        (K_SET, [1, 2, 7, 0], None, None, (0, Reason.WARM)),
        # an unhealthy or draining member is skipped
        (K_SET, [5, 2, 7, 0], [True, False, True, True], None, (0, Reason.WARM)),
        (K_SET, [5, 2, 7, 0], None, [False, True, False, False], (0, Reason.WARM)),
        (K_SET, [5, 2, 7, 0], [False, False, True, True], None, (2, Reason.WARM)),
        # a departed member (-1) is skipped like an unhealthy one
        (K_HALF_GONE, [0, 9, 0, 0], None, None, (1, Reason.WARM)),
    ],
)
def test_cacheroute_warm_key_goes_to_its_least_loaded_eligible_member(
    key: int,
    loads: list[float],
    healthy: list[bool] | None,
    draining: list[bool] | None,
    expected: tuple[int, Reason],
) -> None:
    view = make_view(loads, healthy=healthy, draining=draining)
    assert CacheRoutePolicy().choose(Request(key), view) == expected


@pytest.mark.parametrize(
    ("key", "healthy", "with_table", "reason"),
    [
        (K_SET, [False, False, False, True], True, Reason.FALLBACK_UNHEALTHY),
        (K_HALF_GONE, [True, False, True, True], True, Reason.FALLBACK_UNHEALTHY),
        (K_GONE, None, True, Reason.FALLBACK_UNHEALTHY),  # the only member departed
        (K_UNKNOWN, None, True, Reason.TAIL),
        (K_SET, None, False, Reason.NO_TABLE),
    ],
)
def test_cacheroute_falls_back_to_power_of_two_with_the_reason(
    key: int, healthy: list[bool] | None, with_table: bool, reason: Reason
) -> None:
    view = make_view(healthy=healthy, with_table=with_table)
    policy = CacheRoutePolicy(seed=3)
    for _ in range(20):
        decision = policy.choose(Request(key), view)
        assert decision.reason is reason
        assert view.is_eligible(decision.node)


def test_cacheroute_tail_spreads_by_power_of_two_over_all_eligible_nodes() -> None:
    policy = CacheRoutePolicy(seed=4)
    view = make_view([0.0, 0.0, 0.0, 0.0])
    assert {policy.choose(Request(K_UNKNOWN), view).node for _ in range(100)} == {0, 1, 2, 3}


def test_cacheroute_warm_ties_stay_on_one_member_for_one_key() -> None:
    policy = CacheRoutePolicy()
    view = make_view()
    assert len({policy.choose(Request(K_SET), view).node for _ in range(20)}) == 1


@pytest.mark.parametrize(
    ("policy_class", "placement"),
    [
        (CacheRoutePolicy, "lpt"),
        (AffinityOnlyPolicy, "hash"),
        (ReplicateRandomPolicy, "random"),
    ],
)
def test_cacheroute_and_ablations_route_planned_keys_to_their_sets(
    policy_class: type[CacheRoutePolicy], placement: str
) -> None:
    assert policy_class.placement == placement
    nodes = NodeSet([f"node-{i}" for i in range(6)])
    keys = [hash_key(f"tenant-{i}") for i in range(40)]
    rates = np.array([40.0 / (i + 1) for i in range(40)])
    plan = build_plan(
        PlanInput(
            key_hashes=np.array(keys, dtype=np.uint64),
            rates=rates,
            node_ids=nodes.ids,
            q_cap=5.0,
            slots_per_node=4,
            placement=placement,
            seed=7,
        ),
        created_at_unix_ms=0,
    )
    view = LoadView(nodes, table=plan)
    policy = policy_class(seed=1)
    warm = 0
    for key in keys:
        members = plan.destination_ids(key)
        decision = policy.choose(Request(key), view)
        if members is None:
            assert decision.reason is Reason.TAIL
        else:
            warm += 1
            assert decision.reason is Reason.WARM
            assert nodes.ids[decision.node] in members
            if placement == "hash":
                assert len(members) == 1
    assert warm > 0


def shared_set_table(num_keys: int) -> RoutingTable:
    """``num_keys`` warm keys, all on destinations n0, n1, n2 (the worst case for herding)."""
    return make_table(
        pool="test",
        node_ids=("n0", "n1", "n2"),
        key_hashes=np.arange(1, num_keys + 1, dtype=np.uint64) * 7919,
        set_offsets=(np.arange(num_keys + 1) * 3).astype(np.uint32),
        set_members=np.tile(np.array([0, 1, 2], dtype=np.uint16), num_keys),
        params=PlannerParams(q_cap=1.0, slots_per_node=num_keys),
        created_at_unix_ms=0,
    )


def test_cacheroute_equal_loads_rotate_from_the_key_hash_so_keys_spread_over_a_set() -> None:
    # docs/ARCHITECTURE.md: "equal loads inside a set rotate from key_hash mod k", so warm keys
    # sharing one set do not all pile onto its lowest index while the loads are equal.
    shared = shared_set_table(300)
    view = LoadView(NodeSet(["n0", "n1", "n2"]), table=shared)
    view.apply_snapshot(0.0, [4.0, 4.0, 4.0])
    policy = CacheRoutePolicy()
    chosen = [policy.choose(Request(int(h)), view).node for h in shared.key_hashes]
    assert chosen == [int(h) % 3 for h in shared.key_hashes]
    assert sorted(chosen.count(m) for m in range(3)) == [100, 100, 100]


def test_cacheroute_tie_rotation_skips_ineligible_members() -> None:
    # With member n1 unhealthy the rotation runs over the eligible members [n0, n2] only.
    shared = shared_set_table(40)
    view = LoadView(NodeSet(["n0", "n1", "n2"]), table=shared)
    view.apply_snapshot(0.0, [1.0, 0.0, 1.0], healthy=[True, False, True])
    policy = CacheRoutePolicy()
    for h in shared.key_hashes.tolist():
        assert policy.choose(Request(h), view).node == [0, 2][h % 2]


@pytest.mark.parametrize("memo", [False, True])
def test_cacheroute_follows_health_changes_of_one_view_in_both_directions(memo: bool) -> None:
    """The all-eligible shortcut is the view's current state, not the state it was built in."""
    view = make_view([5, 2, 7, 0])
    if memo:
        view.table = bind_with_memo(TABLE, NODES)
    policy = CacheRoutePolicy()
    assert view.all_eligible
    assert policy.choose(Request(K_SET), view) == (1, Reason.WARM)
    view.set_states(healthy=[True, False, True, True])
    assert not view.all_eligible
    assert policy.choose(Request(K_SET), view) == (0, Reason.WARM)
    view.set_states(healthy=[True] * 4, draining=[True, False, False, False])
    assert policy.choose(Request(K_SET), view) == (1, Reason.WARM)
    view.set_states(draining=[False] * 4)
    assert view.all_eligible
    assert policy.choose(Request(K_SET), view) == (1, Reason.WARM)
    # every node eligible, yet a member departed: still skipped
    assert policy.choose(Request(K_HALF_GONE), make_view([0, 9, 0, 0])) == (1, Reason.WARM)
