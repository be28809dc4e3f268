"""The simulator's plan: rates from a disjoint earlier window, the policy's placement."""

from __future__ import annotations

import numpy as np
import pytest

from dataplane.core.keys import hash_key
from dataplane.core.policies.registry import ABLATIONS, BASELINES, POLICIES
from sim.planning import estimate_rates, make_stream, placement_of, plan_for, split_stream
from tests.support.tiny_workload import TinyWorkload


def test_the_stream_is_split_into_a_prior_window_and_a_disjoint_run() -> None:
    workload = TinyWorkload()
    stream = make_stream(workload, qps=20.0, duration_s=30.0, seed=1, prior_window_s=40.0)
    full = workload.requests(qps=20.0, duration_s=70.0, seed=1)
    assert len(stream.prior) + len(stream.requests) == len(full)
    assert all(r.arrival_s < 40.0 for r in stream.prior)
    assert stream.requests[0].arrival_s >= 0.0 and stream.requests[-1].arrival_s < 30.0
    assert stream.requests[0].blocks == full[len(stream.prior)].blocks  # shifted, not copied


def test_rates_are_counts_over_the_window() -> None:
    stream = split_stream(TinyWorkload().requests(qps=50.0, duration_s=100, seed=2), 100.0, 0.0)
    hashes, rates, labels = estimate_rates(stream.prior, 100.0)
    assert rates.sum() == pytest.approx(len(stream.prior) / 100.0)
    top = int(np.argmax(rates))
    assert labels[int(hashes[top])] == "key-0" and int(hashes[top]) == hash_key("key-0")


def test_rates_scale_with_the_offered_load() -> None:
    low = make_stream(TinyWorkload(), qps=10.0, duration_s=1.0, seed=3, prior_window_s=200.0)
    high = make_stream(TinyWorkload(), qps=40.0, duration_s=1.0, seed=3, prior_window_s=200.0)
    assert estimate_rates(high.prior, 200.0)[1].sum() == pytest.approx(
        4 * estimate_rates(low.prior, 200.0)[1].sum(), rel=0.1
    )


def test_every_registered_policy_names_a_known_placement() -> None:
    for name in (*BASELINES, *ABLATIONS):
        assert name in POLICIES
        assert placement_of(name) in (None, "lpt", "hash", "random")
    assert placement_of("cacheroute") == "lpt"
    assert placement_of("flat") is None


def test_the_plan_is_built_with_the_policys_placement_q_cap_and_slots() -> None:
    stream = make_stream(TinyWorkload(), qps=40.0, duration_s=1.0, seed=1, prior_window_s=60.0)
    nodes = [f"d{i}" for i in range(6)]
    assert plan_for(None, stream, nodes, q_cap=2.0) is None
    table = plan_for("lpt", stream, nodes, q_cap=2.0, slots_per_node=8)
    assert table is not None
    assert table.params.placement == "lpt" and table.params.q_cap == 2.0
    assert table.stats.slots_total == 48
    assert table.stats.max_replicas > 1  # key-0 carries ~23% of 40 req/s > q_cap
    hashed = plan_for("hash", stream, nodes, q_cap=2.0)
    assert hashed is not None and hashed.stats.max_replicas == 1
