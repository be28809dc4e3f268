"""cacheroute_balanced: a conversation is kept under the loose bound and its opening turn placed
under the tight one; everything else is cacheroute_conversation's (issue 30)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies import make_policy
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.cacheroute_balanced import FIRST_EPSILON, CacheRouteBalancedPolicy
from dataplane.core.policies.cacheroute_conversation import CacheRouteConversationPolicy
from tests.support.router_core import table_for

IDS = [f"n{i:02d}" for i in range(12)]
NODES = NodeSet(IDS)
HOT = "acme"
MEMBERS = ["n00", "n01", "n02", "n03"]
TABLE = table_for({HOT: MEMBERS}, IDS)
HOT_HASH = hash_key(HOT)


def view(loads: Sequence[float]) -> LoadView:
    v = LoadView(NODES, table=TABLE)
    v.apply_snapshot(0.0, loads)
    return v


def bounds(loads: Sequence[float]) -> tuple[int, int]:
    """(the tight bound of a placement, the loose bound of a kept conversation)."""
    total = sum(loads) + 1.0
    return math.ceil(1.25 * total / len(loads)), math.ceil(1.75 * total / len(loads))


def home_of(conversation: str) -> int:
    return CacheRouteBalancedPolicy().choose(
        Request(HOT_HASH, flow=conversation), view([10.0] * 12)
    )[0]


def test_the_defaults_are_the_frozen_ones() -> None:
    policy = make_policy("cacheroute_balanced")
    assert isinstance(policy, CacheRouteBalancedPolicy)
    assert (policy.first_epsilon, policy.epsilon, FIRST_EPSILON) == (0.25, 0.75, 0.25)


def test_an_opening_turn_over_the_tight_bound_is_placed_on_another_member() -> None:
    home = home_of("conv-1")
    loads = [10.0] * 12
    loads[home] = 14.0
    tight, loose = bounds(loads)
    assert loads[home] + 1 > tight and loads[home] + 1 <= loose  # between the two bounds
    opening = Request(HOT_HASH, flow="conv-1", opening=True)
    node, reason = CacheRouteBalancedPolicy().choose(opening, view(loads))
    assert reason is Reason.WARM and node != home and node in range(4)
    # cacheroute_conversation, one bound, keeps it: the only difference between the two
    assert CacheRouteConversationPolicy().choose(Request(HOT_HASH, flow="conv-1"), view(loads)) == (
        home,
        Reason.WARM,
    )


def test_a_continuing_turn_no_router_remembers_keeps_its_member_under_the_loose_bound() -> None:
    """Another router placed the conversation (a round-robin front): the same rendezvous member,
    the conversation's bound; only an opening turn is placed under the tight one."""
    home = home_of("conv-1")
    loads = [10.0] * 12
    loads[home] = 14.0
    later = Request(HOT_HASH, flow="conv-1")  # opening not known: a continuing turn
    assert CacheRouteBalancedPolicy().choose(later, view(loads)) == (home, Reason.WARM)


def test_a_conversation_this_router_placed_is_kept_under_the_loose_bound() -> None:
    policy = CacheRouteBalancedPolicy()
    calm = [10.0] * 12
    home = policy.route(Request(HOT_HASH, flow="conv-2"), view(calm), 0.0).node
    busier = list(calm)
    busier[home] = 14.0  # over the tight bound, within the loose one
    assert policy.choose(Request(HOT_HASH, flow="conv-2"), view(busier)) == (home, Reason.SESSION)
    busiest = list(calm)
    busiest[home] = 30.0  # over the loose bound too: the memory lets go
    assert policy.choose(Request(HOT_HASH, flow="conv-2"), view(busiest))[0] != home


def test_an_echoed_token_is_kept_under_the_loose_bound() -> None:
    loads = [10.0] * 12
    loads[2] = 14.0
    request = Request(HOT_HASH, session=2, flow="conv-3")
    assert CacheRouteBalancedPolicy().choose(request, view(loads)) == (2, Reason.SESSION)


def test_every_member_over_the_tight_bound_spills_within_the_loose_one() -> None:
    """The online step's ring spill, which may land on a member: the ring holds every node."""
    loads = [14.0] * 4 + [9.0] * 8
    tight, loose = bounds(loads)
    assert tight < 14.0 + 1
    opening = Request(HOT_HASH, flow="conv-4", opening=True)
    node, reason = CacheRouteBalancedPolicy().choose(opening, view(loads))
    assert reason is Reason.SPILL and loads[node] + 1 <= loose


def test_first_epsilon_is_checked() -> None:
    with pytest.raises(ValueError, match="first_epsilon"):
        CacheRouteBalancedPolicy(first_epsilon=-0.1)
    with pytest.raises(ValueError, match="first_epsilon"):
        CacheRouteBalancedPolicy(epsilon=0.5, first_epsilon=0.6)


def test_with_first_epsilon_equal_to_epsilon_it_is_cacheroute_conversation() -> None:
    one_bound = CacheRouteBalancedPolicy(first_epsilon=0.75)
    plain = CacheRouteConversationPolicy()
    for i in range(200):
        loads = [float((i * 7 + n * 3) % 17) for n in range(12)]
        request = Request(HOT_HASH, flow=f"conv-{i}", opening=i % 2 == 0)
        assert one_bound.route(request, view(loads), 0.0) == plain.route(request, view(loads), 0.0)


def test_with_some_nodes_ineligible_the_tight_bound_counts_the_eligible_ones() -> None:
    loads = [10.0] * 12
    v = view(loads)
    v.set_states(healthy=[True] * 6 + [False] * 6)
    opening = Request(HOT_HASH, flow="conv-5", opening=True)
    node, reason = CacheRouteBalancedPolicy().choose(opening, v)
    assert reason is Reason.WARM and node in range(4)  # 10 + 1 <= ceil(1.25 * 61 / 6) = 13


@settings(max_examples=200, deadline=None)
@given(
    loads=st.lists(st.integers(0, 30), min_size=12, max_size=12),
    conversation=st.text(min_size=1, max_size=40),
    seeds=st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    opening=st.booleans(),
)
def test_routers_given_the_same_inputs_decide_the_same(
    loads: list[int], conversation: str, seeds: tuple[int, int], opening: bool
) -> None:
    """Two routers (own instances, own seeds) reading one snapshot agree on every request."""
    floats = [float(x) for x in loads]
    request = Request(HOT_HASH, flow=conversation, opening=opening)
    first = CacheRouteBalancedPolicy(seed=seeds[0]).choose(request, view(floats))
    second = CacheRouteBalancedPolicy(seed=seeds[1]).choose(request, view(floats))
    assert first == second
