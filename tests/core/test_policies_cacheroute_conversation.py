"""cacheroute_conversation: a conversation keeps one member of its key's set, on every router,
with no token; the bound and the spill are the online step's (issue 30)."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.cacheroute_conversation import (
    CacheRouteConversationPolicy,
    flow_hash,
    rendezvous_first,
)
from dataplane.core.policies.cacheroute_online import CacheRouteOnlinePolicy
from tests.support.router_core import table_for

IDS = [f"n{i:02d}" for i in range(12)]
NODES = NodeSet(IDS)
HOT, COLD = "acme", "nobody"
MEMBERS = ["n00", "n01", "n02", "n03"]
TABLE = table_for({HOT: MEMBERS}, IDS)
HOT_HASH = hash_key(HOT)


def view(loads: Sequence[float], nodes: NodeSet = NODES) -> LoadView:
    v = LoadView(nodes, table=TABLE)
    v.apply_snapshot(0.0, loads)
    return v


def decide(conversation: str, loads: Sequence[float], seed: int = 0) -> tuple[int, Reason]:
    policy = CacheRouteConversationPolicy(seed=seed)
    decision = policy.choose(Request(HOT_HASH, flow=conversation), view(loads))
    return decision.node, decision.reason


def test_a_conversation_keeps_its_member_while_member_loads_change_within_the_bound() -> None:
    calm = [10.0] * 12
    home, reason = decide("conv-1", calm)
    assert reason is Reason.WARM and home in range(4)
    for busy_member in range(4):  # whichever member is busier, within ceil(1.75 * 124 / 12) = 19
        loads = list(calm)
        loads[busy_member] = 16.0
        assert decide("conv-1", loads) == (home, Reason.WARM)


def test_conversations_spread_over_the_members() -> None:
    homes = Counter(decide(f"conv-{i}", [2.0] * 12)[0] for i in range(400))
    assert set(homes) == {0, 1, 2, 3}
    assert min(homes.values()) > 60  # ~100 each: rendezvous hashing is uniform


def test_over_the_bound_a_conversation_moves_to_another_member_then_spills() -> None:
    home, _ = decide("conv-7", [2.0] * 12)
    loads = [2.0] * 12
    loads[home] = 40.0  # over ceil(1.75 * 63 / 12) = 10
    node, reason = decide("conv-7", loads)
    assert reason is Reason.WARM and node != home and node in range(4)
    all_hot = [40.0] * 4 + [1.0] * 8
    node, reason = decide("conv-7", all_hot)
    assert reason is Reason.SPILL and node >= 4
    assert decide("conv-7", all_hot) == (node, reason)  # one spill target per conversation


def test_without_a_conversation_the_least_loaded_member_as_the_online_step() -> None:
    loads = [5.0, 1.0, 4.0, 3.0] + [2.0] * 8
    request = Request(HOT_HASH)
    ours = CacheRouteConversationPolicy().choose(request, view(loads))
    online = CacheRouteOnlinePolicy().choose(request, view(loads))
    assert ours == online == (1, Reason.WARM)


def test_a_valid_session_token_is_still_honoured_first() -> None:
    policy = CacheRouteConversationPolicy()
    decision = policy.choose(Request(HOT_HASH, session=9, flow="conv-1"), view([2.0] * 12))
    assert decision == (9, Reason.SESSION)


def test_a_cold_key_goes_by_the_online_steps_tail() -> None:
    loads = [2.0] * 12
    request = Request(hash_key(COLD), flow="conv-1")
    ours = CacheRouteConversationPolicy().choose(request, view(loads))
    online = CacheRouteOnlinePolicy().choose(request, view(loads))
    assert ours == online and ours.reason is Reason.RING


def test_a_membership_change_moves_only_the_conversations_of_the_node_that_left() -> None:
    before = {f"c{i}": decide(f"c{i}", [2.0] * 12)[0] for i in range(200)}
    gone = IDS[3]
    fewer = NodeSet([n for n in IDS if n != gone])
    policy = CacheRouteConversationPolicy()
    moved = 0
    for conversation, home in before.items():
        v = view([2.0] * 11, fewer)
        node = policy.choose(Request(HOT_HASH, flow=conversation), v).node
        if home != 3:
            assert fewer.ids[node] == IDS[home]
        else:
            moved += 1
    assert moved > 0


@settings(max_examples=200, deadline=None)
@given(
    loads=st.lists(st.integers(0, 30), min_size=12, max_size=12),
    conversation=st.text(min_size=1, max_size=40),
    seeds=st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
)
def test_routers_given_the_same_inputs_decide_the_same(
    loads: list[int], conversation: str, seeds: tuple[int, int]
) -> None:
    """Two routers (own instances, own seeds) reading one snapshot agree on every request."""
    floats = [float(x) for x in loads]
    assert decide(conversation, floats, seeds[0]) == decide(conversation, floats, seeds[1])


def test_the_identity_hash_and_rendezvous_are_pinned() -> None:
    """Any implementation (another language, a native picker) must agree: pinned vectors."""
    assert flow_hash("") == 0
    assert flow_hash(12345) == 12345
    assert flow_hash("conv-1") == flow_hash("conv-1") != flow_hash("conv-2")
    salts = [hash_key(n) for n in IDS]
    first = rendezvous_first(flow_hash("conv-1"), [0, 1, 2, 3], salts, [0.0] * 12, 1.0)
    assert first == decide("conv-1", [2.0] * 12)[0]
    assert rendezvous_first(7, [0, 1], salts, [5.0, 5.0], 4.0) == -1
    # weight = ((flow ^ salt) * 0x9E3779B97F4A7C15) mod 2**64, pinned for other languages
    weights = {m: ((flow_hash("conv-1") ^ salts[m]) * 0x9E3779B97F4A7C15) % 2**64 for m in range(4)}
    assert first == max(weights, key=weights.__getitem__)
    assert flow_hash("conv-1") == ((zlib.crc32(b"conv-1") + 1) * 0x9E3779B97F4A7C15) % 2**64


def test_this_routers_memory_follows_a_spill_and_the_shared_rule_stays_the_fallback() -> None:
    policy = CacheRouteConversationPolicy()
    calm = [10.0] * 12
    home = policy.route(Request(HOT_HASH, flow="conv-3"), view(calm), 0.0).node
    hot = list(calm)
    hot[0:4] = [40.0] * 4  # every member over ceil(1.75 * 241 / 12) = 36
    spilled = policy.route(Request(HOT_HASH, flow="conv-3"), view(hot), 1.0)
    assert spilled.reason is Reason.SPILL
    # the next turn on this router follows the spill (its newest history) while it fits
    assert policy.choose(Request(HOT_HASH, flow="conv-3"), view(calm)) == (
        spilled.node,
        Reason.SESSION,
    )
    # a router that never saw the conversation sends it to its member, as before the spill
    fresh = CacheRouteConversationPolicy()
    assert fresh.choose(Request(HOT_HASH, flow="conv-3"), view(calm)) == (home, Reason.WARM)
    # without memory, the shared rule alone
    forgetful = CacheRouteConversationPolicy(remember=0)
    forgetful.route(Request(HOT_HASH, flow="conv-3"), view(hot), 1.0)
    assert forgetful.choose(Request(HOT_HASH, flow="conv-3"), view(calm)) == (home, Reason.WARM)


def test_the_memory_is_bounded_and_forgets_on_a_membership_change() -> None:
    from dataplane.core.policies.conversation_memory import ConversationMemory  # noqa: PLC0415

    memory = ConversationMemory(8)
    for conversation in range(1, 100):
        memory.put(conversation, conversation % 12)
        assert len(memory) <= 8
    assert memory.get(99) == 99 % 12 and memory.get(98) == 98 % 12
    assert memory.get(1) == -1
    policy = CacheRouteConversationPolicy(remember=16)
    policy.route(Request(HOT_HASH, flow="c"), view([40.0] * 4 + [10.0] * 8), 0.0)
    assert policy.memory is not None and len(policy.memory) == 1
    fewer = NodeSet(IDS[1:])
    policy.choose(Request(HOT_HASH, flow="c"), view([10.0] * 11, fewer))
    assert len(policy.memory) == 0


def test_two_keys_whose_conversations_open_alike_do_not_share_the_memory() -> None:
    """The doors derive a chat's identity from its first turn: two tenants sending the same
    opening message are two conversations, and the memory keeps them apart."""
    other = "globex"
    table = table_for({HOT: MEMBERS, other: ["n08", "n09", "n10", "n11"]}, IDS)
    policy = CacheRouteConversationPolicy()

    def routed(key: str) -> tuple[int, Reason]:
        v = LoadView(NODES, table=table)
        v.apply_snapshot(0.0, [10.0] * 12)
        decision = policy.route(Request(hash_key(key), flow="hello"), v, 0.0)
        return decision.node, decision.reason

    first, reason = routed(HOT)
    assert reason is Reason.WARM and first in range(4)
    node, reason = routed(other)
    assert reason is Reason.WARM and node in range(8, 12)  # not the memory of HOT's "hello"
    assert routed(HOT) == (first, Reason.SESSION)
