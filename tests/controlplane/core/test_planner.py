"""The planner on small hand-checked inputs: Algorithm 1 step by step, limits, bad inputs.

Statistics and labels are in ``test_planner_stats.py``, the placements (weighted LPT and the
ablations) in ``test_planner_placements.py``, property tests over random inputs in
``test_planner_properties.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from controlplane.core.planner import (
    PlanError,
    PlanInput,
    admit,
    build_plan,
    replica_counts,
)
from tests.support.planner_inputs import NODES, plan, sets


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
