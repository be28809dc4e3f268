"""cacheroute_online: session, warm, bounded spill with spread; deterministic across routers."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.cacheroute_online import CacheRouteOnlinePolicy
from dataplane.core.policies.chwbl import load_bound
from dataplane.core.policies.ring import Ring
from dataplane.core.table import PlannerParams, RoutingTable, make_table

N = 12
NODES = NodeSet([f"n{i:02d}" for i in range(N)])
HOT = 1_000_003  # warm key, members 0, 1
COLD = 2_000_029  # not in the table
WITHIN = (Reason.SESSION, Reason.WARM, Reason.SPILL, Reason.RING, Reason.RING_SPILL)


def table(sets: dict[int, list[int]] | None = None) -> RoutingTable:
    sets = sets if sets is not None else {HOT: [0, 1]}
    keys = sorted(sets)
    offsets = np.cumsum([0] + [len(sets[k]) for k in keys])
    return make_table(
        pool="test",
        node_ids=NODES.ids,
        key_hashes=np.array(keys, dtype=np.uint64),
        set_offsets=offsets.astype(np.uint32),
        set_members=np.array([m for k in keys for m in sets[k]], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=2),
        created_at_unix_ms=0,
    )


TABLE = table()


def view(loads: Sequence[float], *, healthy: Sequence[bool] | None = None) -> LoadView:
    v = LoadView(NODES, table=TABLE)
    v.apply_snapshot(0.0, loads, healthy=healthy)
    return v


def test_a_warm_key_goes_to_its_least_loaded_member_within_the_bound() -> None:
    policy = CacheRouteOnlinePolicy()
    decision = policy.choose(Request(HOT), view([3.0, 2.0] + [2.0] * (N - 2)))
    assert decision == (1, Reason.WARM)


def test_over_the_bound_a_warm_key_spills_to_a_ring_node_within_it() -> None:
    loads = [20.0, 20.0] + [1.0] * (N - 2)
    v = view(loads)
    bound = load_bound(v, 0.75)  # ceil(1.75 * 51 / 12) = 8
    assert bound == 8
    decision = CacheRouteOnlinePolicy(spread=1).choose(Request(HOT), v)
    first_within = next(n for n in Ring(NODES).walk(HOT) if loads[n] + 1 <= bound)
    assert decision == (first_within, Reason.SPILL)


def test_a_valid_session_is_honoured_within_the_bound_and_only_then() -> None:
    policy = CacheRouteOnlinePolicy()
    calm = view([2.0] * N)
    assert policy.choose(Request(HOT, session=7), calm) == (7, Reason.SESSION)
    busy = view([2.0] * 7 + [30.0] + [2.0] * (N - 8))  # node 7 is over the bound
    assert policy.choose(Request(HOT, session=7), busy).reason is Reason.WARM
    down = view([2.0] * N, healthy=[i != 7 for i in range(N)])
    assert policy.choose(Request(HOT, session=7), down).node != 7


def test_without_a_session_nothing_changes_from_the_papers_dispatch_below_the_bound() -> None:
    from dataplane.core.policies.cacheroute import CacheRoutePolicy  # noqa: PLC0415

    loads = [4.0, 3.0] + [3.0] * (N - 2)
    assert (
        CacheRouteOnlinePolicy().choose(Request(HOT), view(loads)).node
        == CacheRoutePolicy().choose(Request(HOT), view(loads)).node
    )


def test_the_chwbl_tail_sends_a_cold_key_to_its_ring_home_within_the_bound() -> None:
    home = next(iter(Ring(NODES).walk(COLD)))
    policy = CacheRouteOnlinePolicy(tail="chwbl")
    assert policy.choose(Request(COLD), view([1.0] * N)) == (home, Reason.RING)
    loads = [1.0] * N
    loads[home] = 40.0
    spilled = policy.choose(Request(COLD), view(loads))
    assert spilled.reason is Reason.RING_SPILL and spilled.node != home


def test_parameters_are_checked() -> None:
    for bad in ({"epsilon": -0.1}, {"epsilon": math.inf}, {"spread": 0}, {"tail": "random"}):
        with pytest.raises(ValueError):
            CacheRouteOnlinePolicy(**bad)  # type: ignore[arg-type]


loads_st = st.lists(st.integers(0, 40).map(float), min_size=N, max_size=N)
health_st = st.lists(st.booleans(), min_size=N, max_size=N).filter(any)
request_st = st.builds(
    Request,
    key_hash=st.sampled_from([HOT, COLD, 77, 2**63 + 5]),
    blocks=st.just(()),
    session=st.integers(-1, N - 1),
    flow=st.integers(0, 2**32),
)


@settings(max_examples=200, deadline=None)
@given(loads=loads_st, healthy=health_st, request=request_st, eps=st.sampled_from([0.25, 0.75]),
       spread=st.integers(1, 4))  # fmt: skip
def test_two_routers_given_the_same_inputs_decide_the_same(
    loads: list[float], healthy: list[bool], request: Request, eps: float, spread: int
) -> None:
    """Different seeds (two routers), same table, load view and request: the same decision."""
    a = CacheRouteOnlinePolicy(seed=1, epsilon=eps, spread=spread, tail="chwbl")
    b = CacheRouteOnlinePolicy(seed=2, epsilon=eps, spread=spread, tail="chwbl")
    assert a.choose(request, view(loads, healthy=healthy)) == b.choose(
        request, view(loads, healthy=healthy)
    )


@settings(max_examples=200, deadline=None)
@given(loads=loads_st, healthy=health_st, request=request_st, eps=st.sampled_from([0.0, 0.75]),
       tail=st.sampled_from(["chwbl", "p2c"]))  # fmt: skip
def test_the_bound_holds_and_no_ineligible_node_is_chosen(
    loads: list[float], healthy: list[bool], request: Request, eps: float, tail: str
) -> None:
    """With integer loads every session, warm, spill and ring decision is within the bound."""
    v = view(loads, healthy=healthy)
    bound = load_bound(v, eps)
    decision = CacheRouteOnlinePolicy(epsilon=eps, tail=tail).choose(request, v)
    assert v.is_eligible(decision.node)
    if decision.reason in WITHIN:
        assert loads[decision.node] + 1 <= bound


def spill_targets(routers: int, conversations: int, spread: int) -> Counter[int]:
    """Every router reads the same snapshot (the hot key's members over the bound) and each
    routes its share of conversations, counting its own in-flight decisions as it goes."""
    snapshot = [30.0, 30.0] + [4.0] * (N - 2)
    views = [view(snapshot) for _ in range(routers)]
    policies = [CacheRouteOnlinePolicy(seed=r, spread=spread) for r in range(routers)]
    targets: Counter[int] = Counter()
    for flow in range(conversations):
        r = flow % routers
        decision = policies[r].route(Request(HOT, flow=flow * 7919), views[r], now=0.0)
        assert decision.reason is Reason.SPILL
        targets[decision.node] += 1
    return targets


def test_spills_of_many_routers_spread_over_the_first_ring_nodes_instead_of_herding() -> None:
    """16 routers, one snapshot, 128 spilled conversations (8 per router, so a router's own
    in-flight count alone never reaches the bound): spread 1 herds them all onto one node, spread 3
    splits them over three, each share within a binomial 99.9% band around 1/3."""
    herd = spill_targets(16, 128, spread=1)
    assert len(herd) == 1
    spread = spill_targets(16, 128, spread=3)
    assert len(spread) == 3
    expected, sd = 128 / 3, math.sqrt(128 * (1 / 3) * (2 / 3))
    for count in spread.values():
        assert abs(count - expected) <= 3.3 * sd
    ring_order = [n for n in Ring(NODES).walk(HOT) if n not in (0, 1)][:3]
    assert sorted(spread) == sorted(ring_order)
