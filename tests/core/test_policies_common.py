"""Properties every registered policy must have: determinism, eligibility, membership changes."""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.chwbl import ChwblPolicy
from dataplane.core.policies.registry import (
    ABLATIONS,
    BASELINES,
    BASELINES_2026,
    EXTENSIONS,
    POLICIES,
    UnknownPolicyError,
    make_policy,
)
from dataplane.core.table import PlannerParams, RoutingTable, make_table

NAMES = list(POLICIES)


@cache
def nodeset(size: int) -> NodeSet:
    return NodeSet([f"node-{i}" for i in range(size)])


@cache
def table(size: int) -> RoutingTable:
    """Keys 0..19 warm, each on two consecutive nodes (mod ``size``)."""
    sets = [sorted({k % size, (k + 1) % size}) for k in range(20)]
    offsets = np.cumsum([0] + [len(s) for s in sets])
    return make_table(
        pool="test",
        node_ids=nodeset(size).ids,
        key_hashes=np.arange(20, dtype=np.uint64),
        set_offsets=offsets.astype(np.uint32),
        set_members=np.array([m for s in sets for m in s], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=4),
        created_at_unix_ms=0,
    )


def request(rng: random.Random) -> Request:
    """A key from a small pool (so histories repeat), with a prefix of its key's blocks."""
    key = rng.randrange(40)
    depth = rng.randrange(0, 12)
    blocks = tuple(hash_key(f"{key}/{i}") for i in range(depth))
    return Request(key, blocks)


def drive(name: str, seed: int, steps: int = 300) -> list[Decision]:
    """A fixed scenario: snapshots, health flaps and drains, all from one seeded generator."""
    rng = random.Random(1234)
    policy = make_policy(name, seed=seed)
    view = LoadView(nodeset(8), table=table(8))
    decisions = []
    for step in range(steps):
        if step % 25 == 0:
            healthy = [rng.random() > 0.2 for _ in range(8)]
            healthy[rng.randrange(8)] = True
            view.apply_snapshot(
                float(step), [rng.randrange(0, 80) for _ in range(8)], healthy=healthy
            )
        decisions.append(policy.route(request(rng), view, now=float(step)))
    return decisions


def test_registry_lists_baselines_then_ablations_in_order() -> None:
    assert tuple(POLICIES) == BASELINES + ABLATIONS + EXTENSIONS + BASELINES_2026
    assert all(POLICIES[name].name == name for name in POLICIES)


def test_make_policy_applies_params_and_rejects_unknown_names() -> None:
    policy = make_policy("chwbl", seed=3, epsilon=0.5)
    assert isinstance(policy, ChwblPolicy)
    assert policy.epsilon == 0.5
    with pytest.raises(UnknownPolicyError, match="unknown policy 'nope'"):
        make_policy("nope")
    with pytest.raises(TypeError):
        make_policy("sticky", epsilon=0.5)


# Policies that draw from their seeded RNG: p2c (flat, and cacheroute's tail and fallback) and
# Preble's random tie-break. The others must not depend on the seed at all.
# (cacheroute_online is deterministic with its default chwbl tail; with tail="p2c" it draws)
RANDOMISED = {
    "flat", "preble", "cacheroute", "affinity_only", "replicate_random",
}  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_and_calls_give_the_same_decisions_and_only_random_policies_vary(
    name: str,
) -> None:
    first = drive(name, seed=7)
    assert first == drive(name, seed=7)
    # the check above can fail: another seed changes a randomised policy's choices
    other_seeds_differ = [first != drive(name, seed=seed) for seed in (8, 9)]
    assert other_seeds_differ == [name in RANDOMISED] * 2


@pytest.mark.parametrize("name", NAMES)
def test_every_reason_is_a_reason(name: str) -> None:
    assert all(isinstance(d.reason, Reason) for d in drive(name, seed=1, steps=100))


@pytest.mark.parametrize("name", NAMES)
def test_no_eligible_node_raises(name: str) -> None:
    view = LoadView(nodeset(4), table=table(4))
    view.set_states(healthy=[False, True, True, False], draining=[False, True, True, False])
    with pytest.raises(NoEligibleNodeError):
        make_policy(name).choose(Request(1, (1, 2)), view)


@pytest.mark.parametrize("name", NAMES)
def test_a_nodeset_change_between_calls_is_followed(name: str) -> None:
    policy = make_policy(name, seed=2)
    rng = random.Random(5)
    old = LoadView(nodeset(8), table=table(8))
    for step in range(100):
        policy.route(request(rng), old, now=float(step))
    new_nodes = NodeSet([*nodeset(8).ids[3:], "node-new-a", "node-new-b"])  # 3 left, 2 joined
    new = LoadView(new_nodes, table=table(8))  # the old table, re-bound: departed members are -1
    new.set_states(healthy=[i % 3 != 0 for i in range(len(new_nodes))])
    for step in range(100, 200):
        decision = policy.route(request(rng), new, now=float(step))
        assert new.is_eligible(decision.node)


@st.composite
def cluster(draw: st.DrawFn) -> tuple[int, list[bool], list[bool], list[float]]:
    size = draw(st.integers(1, 8))
    healthy = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    draining = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    loads = draw(
        st.lists(
            st.floats(0, 200, allow_nan=False, allow_infinity=False), min_size=size, max_size=size
        )
    )
    return size, healthy, draining, loads


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None)
@given(state=cluster(), keys=st.lists(st.integers(0, 60), min_size=1, max_size=15))
def test_no_ineligible_node_is_ever_chosen(
    name: str, state: tuple[int, list[bool], list[bool], list[float]], keys: list[int]
) -> None:
    size, healthy, draining, loads = state
    view = LoadView(nodeset(size), table=table(size))
    view.apply_snapshot(0.0, loads, healthy=healthy, draining=draining)
    policy = make_policy(name, seed=0)
    if not view.eligible_nodes:
        with pytest.raises(NoEligibleNodeError):
            policy.choose(Request(keys[0]), view)
        return
    for step, key in enumerate(keys):
        blocks = tuple(range(key % 5, key % 5 + key % 7))  # overlapping prefixes, some empty
        decision = policy.route(Request(key, blocks), view, now=float(step))
        assert view.is_eligible(decision.node), (name, decision)
