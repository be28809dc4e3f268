"""Byte-aware admission (``controlplane/core/byte_admission.py`` via ``build_plan``): budgets hold,
balance holds, equal sizes reduce to Algorithm 1's admission, and bad inputs are named."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.byte_admission import (
    BALANCE_SLACK,
    admit_by_bytes,
    place_best,
    place_lpt_bytes,
    saved_prefill,
)
from controlplane.core.planner import PlanError, PlanInput, admit, build_plan, byte_candidates

EXAMPLES = settings(max_examples=80, deadline=None)


@st.composite
def byte_inputs(draw: st.DrawFn) -> PlanInput:
    num_nodes = draw(st.integers(1, 6))
    size = draw(st.integers(0, 60))
    hashes = draw(st.lists(st.integers(0, 2**64 - 1), unique=True, min_size=size, max_size=size))
    rates = draw(st.lists(st.floats(0.0, 50.0), min_size=size, max_size=size))
    sizes = draw(st.lists(st.sampled_from([1.0, 4.0, 16.0, 100.0]), min_size=size, max_size=size))
    return PlanInput(
        key_hashes=np.array(hashes, dtype=np.uint64),
        rates=np.array(rates, dtype=np.float64),
        node_ids=[f"n{i}" for i in range(num_nodes)],
        q_cap=draw(st.sampled_from([2.0, 10.0, 100.0])),
        slots_per_node=8,
        prefix_sizes=np.array(sizes, dtype=np.float64),
        cache_budget=draw(st.sampled_from([16.0, 50.0, 400.0])),
        byte_rank=draw(st.sampled_from(["rate_per_byte", "rate", "best"])),
    )


@EXAMPLES
@given(byte_inputs())
def test_no_destination_pins_more_prefix_bytes_than_its_budget(plan: PlanInput) -> None:
    assert plan.prefix_sizes is not None
    table = build_plan(plan)
    size_of = dict(zip(plan.key_hashes.tolist(), plan.prefix_sizes.tolist(), strict=True))
    pinned = [0.0] * len(plan.node_ids)
    for row, key_hash in enumerate(table.key_hashes.tolist()):
        for member in table.members(row):
            pinned[member] += size_of[key_hash]
    assert max(pinned) <= plan.cache_budget + 1e-9


@EXAMPLES
@given(byte_inputs())
def test_warm_load_stays_within_the_balance_cap(plan: PlanInput) -> None:
    table = build_plan(plan)
    rate_of = dict(zip(plan.key_hashes.tolist(), plan.rates.tolist(), strict=True))
    warm = [0.0] * len(plan.node_ids)
    for row, key_hash in enumerate(table.key_hashes.tolist()):
        members = table.members(row)
        for member in members:
            warm[member] += rate_of[key_hash] / len(members)
    assert plan.prefix_sizes is not None
    # the cap of the admission the planner kept ("best" places several and keeps one)
    order, _ = place_best(
        byte_candidates(plan), plan.rates, plan.prefix_sizes, [0.0] * len(plan.node_ids),
        [1.0] * len(plan.node_ids), plan.cache_budget,
    )  # fmt: skip
    cap = (1 + BALANCE_SLACK) * float(plan.rates[order].sum()) / len(plan.node_ids)
    assert max(warm) <= cap * (1 + 1e-9)


def test_a_key_larger_than_every_budget_is_never_admitted() -> None:
    plan = PlanInput(
        key_hashes=np.arange(3, dtype=np.uint64), rates=np.array([0.0, 1.0, 1.0]),
        node_ids=["n0", "n1"], q_cap=2.0, slots_per_node=8,
        prefix_sizes=np.array([1.0, 1.0, 100.0]), cache_budget=16.0, byte_rank="best",
    )  # fmt: skip
    for order, _ in byte_candidates(plan):
        assert 2 not in order.tolist()
    # the one key that fits would carry all the warm load of a two-node pool: left cold
    assert build_plan(plan).key_hashes.size == 0


@EXAMPLES
@given(byte_inputs(), st.integers(1, 8))
def test_equal_sizes_and_single_replicas_admit_algorithm_1s_keys(
    plan: PlanInput, slots: int
) -> None:
    num_nodes = len(plan.node_ids)
    sizes = np.full(plan.rates.shape, 7.0)
    order, replicas = admit_by_bytes(
        plan.key_hashes, plan.rates, sizes, 1e9, num_nodes, 7.0 * slots, plan.byte_rank
    )
    assert (replicas == 1).all()
    reference = admit(plan.key_hashes, plan.rates, 1e9, num_nodes, num_nodes * slots)
    assert set(order.tolist()) == set(reference.order.tolist())


def test_small_prefixes_get_more_keys_warm_than_equal_slots_in_the_same_bytes() -> None:
    rates = np.linspace(10.0, 1.0, 40)
    sizes = np.where(np.arange(40) % 4 == 0, 64.0, 4.0)  # every fourth key has a long prefix
    plan = PlanInput(
        key_hashes=np.arange(1, 41, dtype=np.uint64), rates=rates,
        node_ids=["a", "b"], q_cap=100.0, slots_per_node=4,
    )  # fmt: skip
    mean = float(sizes.mean())
    byte_aware = replace(plan, prefix_sizes=sizes, cache_budget=4 * mean)
    assert build_plan(byte_aware).num_keys > build_plan(plan).num_keys == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prefix_sizes": np.ones(3)}, "prefix sizes for 4 keys"),
        ({"prefix_sizes": np.array([1.0, 0.0, 1.0, 1.0])}, "finite and > 0"),
        ({"cache_budget": 0.0}, "cache_budget"),
        ({"placement": "hash"}, "placement lpt"),
        ({"byte_rank": "bytes"}, "byte_rank"),
    ],
)
def test_bad_byte_aware_inputs_are_named(change: dict[str, object], message: str) -> None:
    plan = PlanInput(
        key_hashes=np.arange(1, 5, dtype=np.uint64), rates=np.ones(4), node_ids=["a"],
        q_cap=1.0, slots_per_node=1, prefix_sizes=np.ones(4), cache_budget=2.0,
    )  # fmt: skip
    with pytest.raises(PlanError, match=message):
        build_plan(replace(plan, **change))  # type: ignore[arg-type]


def test_keys_that_fit_within_the_balance_slack_are_placed_not_left_to_the_tail() -> None:
    """Two equal hot keys on two destinations sit exactly at the mean warm load (10 of 10.5):
    inside the (1 + ε) cap they are placed one per destination, with the small key beside one
    of them, rather than dropped to the cold tail."""
    plan = PlanInput(
        key_hashes=np.array([1, 2, 3], dtype=np.uint64),
        rates=np.array([10.0, 10.0, 1.0]),
        node_ids=["a", "b"],
        q_cap=100.0,
        slots_per_node=8,
        prefix_sizes=np.array([1.0, 1.0, 1.0]),
        cache_budget=100.0,
        byte_rank="rate",
    )
    table = build_plan(plan)
    sets = {int(h): table.members(row) for row, h in enumerate(table.key_hashes.tolist())}
    assert sorted(sets) == [1, 2, 3]
    assert sorted(m for key in (1, 2) for m in sets[key]) == [0, 1]


def saved(plan: PlanInput, table: object) -> float:
    """J of a built table: Σ rate × prefix size over its warm keys."""
    assert plan.prefix_sizes is not None
    index = {int(h): i for i, h in enumerate(plan.key_hashes.tolist())}
    warm = [index[int(h)] for h in table.key_hashes.tolist()]  # type: ignore[attr-defined]
    return float(sum(plan.rates[i] * plan.prefix_sizes[i] for i in warm))


@EXAMPLES
@given(byte_inputs())
def test_best_saves_at_least_the_prefill_of_either_rank_and_of_equal_slots(
    plan: PlanInput,
) -> None:
    assert plan.prefix_sizes is not None
    best = saved(plan, build_plan(replace(plan, byte_rank="best")))
    for rank in ("rate_per_byte", "rate"):
        assert best >= saved(plan, build_plan(replace(plan, byte_rank=rank))) - 1e-9
    nodes = len(plan.node_ids)
    slots = byte_candidates(replace(plan, byte_rank="best"))[-1]  # equal slots, keys that fit
    loads = [0.0] * nodes
    order, placed = place_best(
        [slots], plan.rates, plan.prefix_sizes, loads, [1.0] * nodes, plan.cache_budget
    )
    equal = saved_prefill(plan.rates[order], plan.prefix_sizes[order], placed)
    assert best >= equal - 1e-9


# -- place_lpt_bytes with node weights: pinned placements (issue 36: a mutant that ignored the
# weights survived two mutation runs) -----------------------------------------------------------


def test_weighted_lpt_fills_a_node_in_proportion_to_its_weight() -> None:
    """Two empty nodes of weight 1 and 3, four unit keys of one replica each: by load ÷ weight the
    heavy node takes three (0 / 1 ties to node 0 first, then 1/1 > 1/3 > 2/3 ... ); ignoring the
    weights would alternate 0, 1, 0, 1."""
    sets = place_lpt_bytes(
        rates=[1.0] * 4, replicas=[1] * 4, sizes=[1.0] * 4, loads=[0.0, 0.0],
        weights=[1.0, 3.0], budget_per_node=100.0,
    )  # fmt: skip
    assert sets == [[0], [1], [1], [1]]


def test_weighted_lpt_starts_from_initial_load_per_weight() -> None:
    """Initial loads 2 and 3 on weights 1 and 3: node 1 is the lighter (1.0 < 2.0)."""
    sets = place_lpt_bytes(
        rates=[0.5], replicas=[1], sizes=[1.0], loads=[2.0, 3.0], weights=[1.0, 3.0],
        budget_per_node=100.0,
    )  # fmt: skip
    assert sets == [[1]]


def test_the_load_cap_is_per_unit_of_weight() -> None:
    """Cap 1.0: a 1.5 req/s key overloads the weight-1 node (1.5) but fits the weight-2 node
    (0.75); with both at weight 1 it fits neither and joins the tail."""
    common = {"rates": [1.5], "replicas": [1], "sizes": [1.0], "budget_per_node": 10.0}
    assert place_lpt_bytes(loads=[0.0, 0.0], weights=[1.0, 2.0], load_cap=1.0, **common) == [[1]]
    assert place_lpt_bytes(loads=[0.0, 0.0], weights=[1.0, 1.0], load_cap=1.0, **common) == [None]


def test_weighted_lpt_keeps_the_heavier_node_ahead_after_a_tail_key() -> None:
    """A key that cannot be placed (too big) leaves the weighted order as it was: the weight-4 node
    takes the third and fourth keys (0.25 < 1.0); unweighted, the fourth ties back to node 0."""
    sets = place_lpt_bytes(
        rates=[4.0, 1.0, 1.0, 1.0], replicas=[1, 1, 1, 1], sizes=[50.0, 1.0, 1.0, 1.0],
        loads=[0.0, 0.0], weights=[1.0, 4.0], budget_per_node=10.0,
    )  # fmt: skip
    assert sets == [None, [0], [1], [1]]


def test_a_partly_placed_key_puts_its_nodes_back_at_their_weighted_load() -> None:
    """Key A needs two replicas but node 0 is over the cap, so A joins the tail and node 1 goes
    back into the heap at 4 ÷ 4 = 1.0, ahead of node 0 (2 ÷ 1): key B lands on node 1."""
    sets = place_lpt_bytes(
        rates=[1.0, 0.1], replicas=[2, 1], sizes=[1.0, 1.0], loads=[2.0, 4.0],
        weights=[1.0, 4.0], budget_per_node=10.0, load_cap=2.2,
    )  # fmt: skip
    assert sets == [None, [1]]
