"""The planner on small hand-checked inputs: Algorithm 1 step by step, statistics, bad inputs.

Property tests over random inputs live in ``test_planner_properties.py``.
"""

from __future__ import annotations

import math
import time
import types
from typing import Any

import numpy as np
import pytest

from controlplane.core import planner
from controlplane.core.placements import place_lpt
from controlplane.core.planner import (
    TOP_KEYS,
    PlanError,
    PlanInput,
    admit,
    build_plan,
    replica_counts,
)
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable

NODES = ["a", "b", "c"]


def plan(rates: dict[int, float], *, nodes: list[str] | None = None, **kwargs: Any) -> RoutingTable:
    args: dict[str, Any] = {"q_cap": 10.0, "slots_per_node": 2, **kwargs}
    return build_plan(
        PlanInput(
            key_hashes=np.array(list(rates), dtype=np.uint64),
            rates=np.array(list(rates.values()), dtype=np.float64),
            node_ids=nodes or NODES,
            **args,
        ),
        created_at_unix_ms=1,
    )


def sets(table: RoutingTable) -> dict[int, list[int]]:
    return {int(h): table.members(i) for i, h in enumerate(table.key_hashes)}


# -- Algorithm 1 by hand ----------------------------------------------------------------------


def test_replica_count_is_ceil_rate_over_qcap_at_least_one_at_most_r() -> None:
    rates = np.array([0.0, 0.5, 10.0, 10.01, 25.0, 1e9])
    assert replica_counts(rates, 10.0, 4).tolist() == [1, 1, 1, 2, 3, 4]


def test_worked_example_places_each_key_on_the_least_loaded_destinations() -> None:
    # C = 3 * 2 = 6 slots: k = 3, 1, 1, 1 -> everything admitted, no cold tail
    table = plan({1: 25.0, 2: 8.0, 3: 4.0, 4: 1.0})
    assert sets(table) == {1: [0, 1, 2], 2: [0], 3: [1], 4: [2]}
    third = 25.0 / 3
    assert table.stats.planned_load == pytest.approx((third + 8, third + 4, third + 1))
    assert table.stats.planned_imbalance == pytest.approx((third + 8) / (third + 13 / 3))
    assert (table.stats.slots_used, table.stats.slots_total) == (6, 6)
    assert table.stats.max_replicas == 3
    assert table.stats.tail_rate == 0.0
    assert table.stats.admitted_rate_share == 1.0


def test_admission_stops_at_the_first_key_that_does_not_fit() -> None:
    # C = 3: key 1 takes 2 slots, key 2 needs 2 more (4 > 3), so key 3 (1 slot) is not admitted
    table = plan({1: 15.0, 2: 12.0, 3: 1.0}, slots_per_node=1)
    assert sets(table).keys() == {1}
    assert table.stats.slots_used == 2
    assert table.stats.tail_rate == pytest.approx(13.0)
    assert table.stats.admitted_rate_share == pytest.approx(15.0 / 28.0)


def test_cold_tail_is_the_initial_load_split_evenly() -> None:
    # one slot per node; the two keys left out (rate 6) start every destination at 2
    table = plan({1: 5.0, 2: 4.0, 3: 3.0, 4: 3.0, 5: 3.0}, slots_per_node=1)
    assert sets(table) == {1: [0], 2: [1], 3: [2]}
    assert table.stats.planned_load == pytest.approx((7.0, 6.0, 5.0))


def test_cold_tail_and_placement_follow_capacity_weights() -> None:
    # C = 2: keys 3 and 1 are admitted; key 2's rate 4 is the tail, split 1:3 -> loads 1 and 3,
    # both 1 per unit of weight. Key 3 takes the tie at index 0 (load 9, normalised 9), so key 1
    # goes to the big node (3 + 4 = 7, normalised 7/3).
    table = plan(
        {3: 8.0, 1: 4.0, 2: 4.0}, nodes=["small", "big"], slots_per_node=1, node_weights=[1, 3]
    )
    assert sets(table) == {3: [0], 1: [1]}
    assert table.stats.planned_load == pytest.approx((1.0 + 8.0, 3.0 + 4.0))
    # imbalance is max / mean of load per unit of weight
    assert table.stats.planned_imbalance == pytest.approx(9.0 / ((9.0 + 7.0 / 3) / 2))


def test_equal_rates_are_admitted_in_increasing_key_hash_order() -> None:
    table = plan({30: 2.0, 10: 2.0, 20: 2.0, 40: 2.0}, slots_per_node=1)
    assert sorted(sets(table)) == [10, 20, 30]
    assert [label.key_hash for label in table.top_keys] == [10, 20, 30]


def test_keys_with_rate_zero_are_never_admitted() -> None:
    table = plan({1: 0.0, 2: 0.0, 3: 1.0}, slots_per_node=10)
    assert sets(table).keys() == {3}


def test_replicas_are_capped_at_the_number_of_destinations() -> None:
    table = plan({1: 1000.0}, q_cap=1.0)
    assert sets(table) == {1: [0, 1, 2]}


def test_a_single_slot_admits_the_top_key() -> None:
    table = plan({1: 3.0, 2: 5.0}, nodes=["only"], slots_per_node=1)
    assert sets(table) == {2: [0]}
    assert table.stats.tail_rate == pytest.approx(3.0)


def test_zero_slots_admits_nothing_and_everything_is_tail() -> None:
    table = plan({1: 3.0, 2: 3.0}, slots_per_node=0)
    assert table.num_keys == 0
    assert table.stats.planned_load == pytest.approx((2.0, 2.0, 2.0))
    assert table.stats.planned_imbalance == pytest.approx(1.0)


def test_no_keys_gives_an_empty_balanced_plan() -> None:
    table = plan({})
    assert table.num_keys == 0
    assert table.stats.total_rate == 0.0
    assert table.stats.admitted_rate_share == 0.0
    assert table.stats.planned_imbalance == 1.0
    assert (table.stats.max_replicas, table.stats.slots_used) == (0, 0)


def test_admit_partitions_only_when_there_are_more_candidates_than_slots() -> None:
    hashes = np.arange(1, 11, dtype=np.uint64)
    rates = np.array([1.0, 9, 2, 8, 3, 7, 4, 6, 5, 5])
    admission = admit(hashes, rates, q_cap=100.0, num_nodes=2, slots_total=4)
    assert rates[admission.order].tolist() == [9, 8, 7, 6]
    assert admission.replicas.tolist() == [1, 1, 1, 1]
    assert admission.slots_total == 4
    assert admit(hashes, rates, q_cap=100.0, num_nodes=2, slots_total=0).slots_total == 0


# -- statistics, labels, params ---------------------------------------------------------------


def test_statistics_describe_the_plan() -> None:
    table = plan({1: 25.0, 2: 8.0, 3: 4.0, 4: 1.0, 5: 0.5}, slots_per_node=2)
    stats = table.stats
    assert stats.num_keys == 5
    assert stats.admitted_keys == table.num_keys == 4
    assert stats.total_rate == pytest.approx(38.5)
    assert stats.tail_rate == pytest.approx(0.5)
    assert math.fsum(stats.planned_load) == pytest.approx(stats.total_rate)
    assert stats.build_ms > 0.0


def test_build_ms_is_the_planners_own_elapsed_time_in_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter([100.0, 100.25])  # the planner reads its clock at the start and at the end
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks), time=lambda: 5.0)
    monkeypatch.setattr(planner, "time", clock)
    assert plan({1: 1.0, 2: 3.0}).stats.build_ms == pytest.approx(250.0)


def test_statistics_of_a_plan_below_one_request_per_second_per_node() -> None:
    # Fractional rates are ordinary rates: shares and imbalance must not round to 0 or 1.
    table = plan({1: 0.3, 2: 0.1, 3: 0.05}, slots_per_node=1)  # C = 3: everything admitted
    stats = table.stats
    assert sets(table) == {1: [0], 2: [1], 3: [2]}
    assert stats.admitted_rate_share == pytest.approx(1.0)
    assert stats.planned_load == pytest.approx((0.3, 0.1, 0.05))
    assert stats.planned_imbalance == pytest.approx(0.3 / (0.45 / 3))
    tail = plan({1: 0.3, 2: 0.1, 3: 0.05}, slots_per_node=0).stats
    assert tail.admitted_rate_share == 0.0
    assert tail.planned_imbalance == pytest.approx(1.0)
    half = plan({1: 0.3, 2: 0.1, 3: 0.05, 4: 0.05}, nodes=["a"], slots_per_node=2).stats
    assert half.admitted_rate_share == pytest.approx(0.4 / 0.5)


def test_top_keys_carry_their_labels_in_admission_order() -> None:
    labels = {hash_key("acme"): "acme", hash_key("globex"): "globex"}
    rates = {hash_key("globex"): 2.0, hash_key("acme"): 5.0, hash_key("unlabelled"): 1.0}
    table = plan(rates, key_labels=labels)
    assert [(k.key, k.rate) for k in table.top_keys] == [("acme", 5.0), ("globex", 2.0), ("", 1.0)]


def test_top_keys_are_bounded() -> None:
    table = plan({h: float(h) for h in range(1, 300)}, slots_per_node=200, q_cap=1000.0)
    assert len(table.top_keys) == TOP_KEYS
    assert table.top_keys[0].key_hash == 299


def test_params_record_the_inputs_and_the_seed_only_for_random_placement() -> None:
    lpt = plan({1: 1.0}, seed=5, node_weights=[1.0, 2.0, 3.0])
    assert (lpt.params.q_cap, lpt.params.slots_per_node, lpt.params.placement) == (10.0, 2, "lpt")
    assert lpt.params.node_weights == (1.0, 2.0, 3.0)
    assert lpt.params.seed == 0
    random = plan({1: 1.0}, placement="random", seed=5).params
    assert (random.placement, random.seed) == ("random", 5)
    assert plan({1: 1.0}, placement="hash", seed=5).params.placement == "hash"


def test_integer_weights_give_the_same_plan_and_version_as_the_equal_floats() -> None:
    ints = plan({1: 4.0, 2: 2.0}, node_weights=[1, 3, 2])
    floats = plan({1: 4.0, 2: 2.0}, node_weights=[1.0, 3.0, 2.0])
    assert ints.content_hash == floats.content_hash


def test_creation_time_defaults_to_now_in_milliseconds() -> None:
    before = int(time.time() * 1000)
    table = build_plan(
        PlanInput(
            key_hashes=np.array([1], dtype=np.uint64),
            rates=np.array([1.0]),
            node_ids=NODES,
            q_cap=1.0,
            slots_per_node=1,
        )
    )
    assert before <= table.created_at_unix_ms <= int(time.time() * 1000)


def test_pool_and_creation_time_are_recorded() -> None:
    table = plan({1: 1.0}, pool="eu-west")
    assert table.pool == "eu-west"
    assert table.created_at_unix_ms == 1


# -- capacity weights in LPT ------------------------------------------------------------------


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


# -- limits and duplicates --------------------------------------------------------------------


def test_the_largest_allowed_cluster_of_65535_destinations_is_planned() -> None:
    nodes = [f"n{i}" for i in range(65535)]
    table = plan({1: 5.0, 2: 1.0}, nodes=nodes, q_cap=1.0, slots_per_node=1)
    assert len(table.node_ids) == 65535
    assert sets(table) == {1: [0, 1, 2, 3, 4], 2: [5]}


@pytest.mark.parametrize("repeat", [101, 105, 109, 112], ids=lambda h: f"repeat-{h}")
def test_a_repeated_admitted_key_is_rejected_wherever_it_sorts(repeat: int) -> None:
    hashes = [112, 101, 109, 105, repeat]
    rates = [5.0, 4.0, 3.0, 2.0, 1.0]
    with pytest.raises(PlanError, match=f"key_hashes repeat {repeat}; a key is listed once"):
        build_plan(
            PlanInput(
                key_hashes=np.array(hashes, dtype=np.uint64),
                rates=np.array(rates),
                node_ids=NODES,
                q_cap=10.0,
                slots_per_node=4,
            )
        )


# -- ablation placements ----------------------------------------------------------------------


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


# -- bad input --------------------------------------------------------------------------------

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("no nodes", {"node_ids": []}, "no destinations"),
    ("duplicate node ids", {"node_ids": ["a", "a"]}, "destination ids are not unique"),
    ("too many nodes", {"node_ids": [str(i) for i in range(65536)]}, "65536 destinations"),
    ("rates misaligned", {"rates": np.array([1.0])}, "2 keys but 1 rates"),
    ("q_cap zero", {"q_cap": 0.0}, "q_cap must be a positive number"),
    ("q_cap negative", {"q_cap": -1.0}, "q_cap must be a positive number"),
    ("q_cap nan", {"q_cap": math.nan}, "q_cap must be a positive number"),
    ("q_cap inf", {"q_cap": math.inf}, "q_cap must be a positive number"),
    ("slots negative", {"slots_per_node": -1}, "slots_per_node must be >= 0"),
    ("placement unknown", {"placement": "greedy"}, "placement must be one of"),
    ("rate negative", {"rates": np.array([1.0, -0.5])}, "rates must be finite and >= 0"),
    ("rate nan", {"rates": np.array([1.0, math.nan])}, "rates must be finite and >= 0"),
    ("rate inf", {"rates": np.array([math.inf, 1.0])}, "rates must be finite and >= 0"),
    ("weights count", {"node_weights": [1.0]}, "1 weights for 2 destinations"),
    ("weight zero", {"node_weights": [1.0, 0.0]}, "destination weights must be positive"),
    ("weight nan", {"node_weights": [1.0, math.nan]}, "destination weights must be positive"),
    ("seed negative", {"placement": "random", "seed": -1}, "seed must be"),
    ("seed too big", {"seed": 2**64}, "seed must be"),
    ("duplicate keys", {"key_hashes": np.array([7, 7], np.uint64)}, "key_hashes repeat 7"),
]


@pytest.mark.parametrize(("change", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_raises_plan_error_naming_the_input(change: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "key_hashes": np.array([7, 8], dtype=np.uint64),
        "rates": np.array([1.0, 2.0]),
        "node_ids": ["a", "b"],
        "q_cap": 1.0,
        "slots_per_node": 4,
        **change,
    }
    with pytest.raises(PlanError, match=f"^{message}"):  # the message starts with the rule
        build_plan(PlanInput(**args))
