"""The planner's placements on small inputs: LPT by load per unit of capacity weight, and the
hash and random ablations."""

from __future__ import annotations

import math

import pytest

from controlplane.core.placements import place_lpt
from tests.support.planner_inputs import plan, sets


def test_lpt_compares_destinations_by_load_per_unit_of_weight() -> None:
    # node 1 has twice node 0's capacity: its load 3 is 1.5 per unit, below node 0's 2
    loads = [2.0, 3.0]
    assert place_lpt([6.0], [1], loads, [1.0, 2.0]) == [[1]]
    assert loads == [2.0, 9.0]


def test_lpt_keeps_placing_by_normalised_load_as_it_fills_weighted_destinations() -> None:
    # weights 1 and 2, four keys of rate 2: normalised loads go (0,0) -> (2,0) -> (2,1) -> (2,2)
    loads = [0.0, 0.0]
    assert place_lpt([2.0] * 4, [1] * 4, loads, [1.0, 2.0]) == [[0], [1], [1], [0]]
    assert loads == [4.0, 4.0]


def test_lpt_splits_a_replicated_keys_rate_over_its_least_loaded_destinations() -> None:
    loads = [1.0, 0.0, 5.0, 0.5]
    assert place_lpt([9.0], [3], loads, [1.0] * 4) == [[0, 1, 3]]
    assert loads == [4.0, 3.0, 5.0, 3.5]


def test_weighted_plan_puts_more_warm_keys_on_bigger_destinations() -> None:
    rates = {h: 1.0 for h in range(1, 31)}
    table = plan(rates, nodes=["small", "big"], slots_per_node=30, node_weights=[1.0, 4.0])
    per_node = [sum(m == [r] for m in sets(table).values()) for r in range(2)]
    assert per_node == [6, 24]  # load per unit of weight ends equal: 6 / 1 == 24 / 4


def test_hash_placement_puts_each_key_on_hash_mod_r_alone() -> None:
    rates = {101: 50.0, 202: 40.0, 303: 30.0, 404: 1.0}
    table = plan(rates, placement="hash", slots_per_node=1)
    # one slot per key regardless of rate: the top C = 3 keys
    assert sets(table) == {101: [101 % 3], 202: [202 % 3], 303: [303 % 3]}
    assert table.stats.max_replicas == 1


def test_hash_placement_adds_up_the_rates_of_keys_that_share_a_destination() -> None:
    table = plan({3: 5.0, 6: 4.0, 7: 2.0}, placement="hash", slots_per_node=2)
    assert sets(table) == {3: [0], 6: [0], 7: [1]}
    assert table.stats.planned_load == pytest.approx((9.0, 2.0, 0.0))


def test_random_placement_draws_k_distinct_destinations_deterministically() -> None:
    rates = {h: 25.0 if h < 5 else 3.0 for h in range(1, 40)}
    nodes = [f"n{i}" for i in range(8)]
    first = plan(rates, nodes=nodes, placement="random", seed=3, slots_per_node=6)
    again = plan(rates, nodes=nodes, placement="random", seed=3, slots_per_node=6)
    other = plan(rates, nodes=nodes, placement="random", seed=4, slots_per_node=6)
    assert first.content_hash == again.content_hash
    assert sets(first) != sets(other)
    assert all(len(s) == (3 if h < 5 else 1) for h, s in sets(first).items())


def test_random_placement_plans_each_replicas_share_of_the_rate() -> None:
    rates = {1: 30.0, 2: 10.0, 3: 6.0, 4: 2.0}
    table = plan(rates, nodes=["a", "b", "c", "d"], placement="random", seed=9, q_cap=10.0)
    expected = [0.0] * 4
    for key, members in sets(table).items():
        for m in members:
            expected[m] += rates[key] / len(members)
    assert table.stats.planned_load == pytest.approx(expected)
    assert math.fsum(table.stats.planned_load) == pytest.approx(48.0)
