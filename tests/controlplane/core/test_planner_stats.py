"""What a plan records besides its sets: statistics, top-key labels, parameters, creation time."""

from __future__ import annotations

import math
import time
import types

import numpy as np
import pytest

from controlplane.core import planner
from controlplane.core.planner import (
    TOP_KEYS,
    PlanInput,
    build_plan,
)
from dataplane.core.keys import hash_key
from tests.support.planner_inputs import NODES, plan, sets


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
