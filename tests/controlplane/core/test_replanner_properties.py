"""Property tests (hypothesis) for the churn-aware replanner (``controlplane/core/replanner.py``).

Random previous plans, drifted rates and changed pools; each property restates a promise of the
replanner's docstring and checks it from the tables, not from replanner internals.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.churn import churn
from controlplane.core.planner import PlanInput, build_plan
from controlplane.core.replanner import replan
from dataplane.core.table import RoutingTable

EXAMPLES = settings(max_examples=80, deadline=None)


@st.composite
def drifts(draw: st.DrawFn) -> tuple[PlanInput, PlanInput, float]:
    """A previous input, the next one (drifted rates, maybe a changed pool) and a tolerance."""
    num_nodes = draw(st.integers(1, 8))
    size = draw(st.integers(0, 50))
    hashes = draw(st.lists(st.integers(0, 2**64 - 1), unique=True, min_size=size, max_size=size))
    rates = np.array(
        draw(st.lists(st.floats(0.0, 50.0), min_size=size, max_size=size)), dtype=np.float64
    )
    sigma = draw(st.sampled_from([0.0, 0.1, 0.3, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    drifted = rates * np.exp(sigma * rng.standard_normal(size))
    nodes = [f"node-{i}" for i in range(num_nodes)]
    next_nodes = draw(st.sampled_from(["same", "drop", "add"]))
    if next_nodes == "drop" and num_nodes > 1:
        new_nodes = nodes[1:]
    elif next_nodes == "add":
        new_nodes = [*nodes, "node-new"]
    else:
        new_nodes = nodes
    weights = draw(st.one_of(st.just(()), st.just(tuple([2.0] + [1.0] * (len(new_nodes) - 1)))))
    q_cap = draw(st.sampled_from([1.0, 5.0, 20.0]))
    slots = draw(st.integers(0, 4))
    before = PlanInput(
        key_hashes=np.array(hashes, dtype=np.uint64),
        rates=rates,
        node_ids=nodes,
        q_cap=q_cap,
        slots_per_node=slots,
    )
    after = replace(before, rates=drifted, node_ids=new_nodes, node_weights=weights)
    return before, after, draw(st.sampled_from([0.0, 0.05, 0.2]))


def _sets(table: RoutingTable) -> dict[int, frozenset[str]]:
    return {
        int(h): frozenset(table.node_ids[m] for m in table.members(i))
        for i, h in enumerate(table.key_hashes.tolist())
    }


@EXAMPLES
@given(drifts())
def test_the_replan_stays_within_the_bound_of_the_fresh_plans_imbalance(
    case: tuple[PlanInput, PlanInput, float],
) -> None:
    before, after, tolerance = case
    result = replan(build_plan(before), after, tolerance=tolerance)
    fresh = build_plan(after)
    assert result.fresh_imbalance == fresh.stats.planned_imbalance
    limit = fresh.stats.planned_imbalance * (1 + tolerance)
    assert result.table.stats.planned_imbalance <= limit * (1 + 1e-9)


@EXAMPLES
@given(drifts())
def test_the_replan_never_churns_more_than_the_fresh_plan(
    case: tuple[PlanInput, PlanInput, float],
) -> None:
    before, after, tolerance = case
    previous = build_plan(before)
    result = replan(previous, after, tolerance=tolerance)
    assert result.churn == churn(previous, result.table)
    assert result.churn <= churn(previous, build_plan(after)) + 1e-12


@EXAMPLES
@given(drifts())
def test_the_replan_admits_what_the_fresh_plan_admits_with_the_same_replica_counts(
    case: tuple[PlanInput, PlanInput, float],
) -> None:
    before, after, tolerance = case
    result = replan(build_plan(before), after, tolerance=tolerance).table
    fresh = build_plan(after)
    np.testing.assert_array_equal(result.key_hashes, fresh.key_hashes)
    np.testing.assert_array_equal(result.set_offsets, fresh.set_offsets)
    assert result.node_ids == fresh.node_ids
    for sizes in (np.diff(result.set_offsets),):
        assert (sizes >= 1).all()
    assert math.isclose(result.stats.total_rate, fresh.stats.total_rate)


@EXAMPLES
@given(drifts())
def test_identical_rates_give_zero_churn(case: tuple[PlanInput, PlanInput, float]) -> None:
    before, _, tolerance = case
    previous = build_plan(before)
    again = replan(previous, before, tolerance=tolerance)
    assert again.churn == 0.0
    # and a churn-aware plan, replanned on the rates that produced it, stays put too
    _, after, _ = case
    drifted = replan(previous, after, tolerance=tolerance).table
    settled = replace(after)
    assert replan(drifted, settled, tolerance=tolerance).churn == 0.0


@EXAMPLES
@given(drifts())
def test_a_removed_destination_is_in_no_set_and_kept_keys_keep_their_sets(
    case: tuple[PlanInput, PlanInput, float],
) -> None:
    before, after, tolerance = case
    previous = build_plan(before)
    result = replan(previous, after, tolerance=tolerance)
    new_sets = _sets(result.table)
    for members in new_sets.values():
        assert members <= set(after.node_ids)
    old_sets = _sets(previous)
    unchanged = sum(1 for h, s in new_sets.items() if old_sets.get(h) == s)
    if not result.used_fresh:
        assert result.kept_keys == unchanged


def _forced_changes(previous: RoutingTable, fresh: RoutingTable) -> tuple[int, int]:
    """(keys the admission forces to churn, keys in either plan): keys leaving or joining the
    warm set, and common keys whose replica count changed or lost a destination of the pool."""
    old, new = _sets(previous), _sets(fresh)
    pool = set(fresh.node_ids)
    forced = len(old.keys() ^ new.keys())
    for key in old.keys() & new.keys():
        if len(old[key]) != len(new[key]) or not old[key] <= pool:
            forced += 1
    return forced, len(old.keys() | new.keys())


@EXAMPLES
@given(drifts(), st.sampled_from([0.0, 0.05, 0.1, 0.3]))
def test_with_a_churn_cap_the_replan_changes_at_most_the_cap_or_what_admission_forces(
    case: tuple[PlanInput, PlanInput, float], max_churn: float
) -> None:
    before, after, tolerance = case
    previous = build_plan(before)
    result = replan(previous, after, tolerance=tolerance, max_churn=max_churn)
    forced, either = _forced_changes(previous, build_plan(after))
    if either == 0:
        return
    churned = either - round((1 - result.churn) * either)  # keys moved, joined or left
    assert churned <= max(forced, math.floor(max_churn * either + 1e-9))
    assert result.churn <= churn(previous, build_plan(after)) + 1e-12  # never worse than fresh
    limit = result.fresh_imbalance * (1 + tolerance) * (1 + 1e-9)
    assert result.bound_met == (result.table.stats.planned_imbalance <= limit)
    assert result.used_fresh or result.churn == churn(previous, result.table)


@EXAMPLES
@given(drifts())
def test_a_cap_the_replan_can_meet_changes_nothing_when_rates_stay(
    case: tuple[PlanInput, PlanInput, float],
) -> None:
    before, _, tolerance = case
    previous = build_plan(before)
    result = replan(previous, before, tolerance=tolerance, max_churn=0.1)
    assert result.churn == 0.0 and result.bound_met


def test_a_binding_cap_holds_where_the_uncapped_repair_moves_more() -> None:
    rng = np.random.default_rng(0)
    keys = 40
    before = PlanInput(
        key_hashes=np.arange(1, keys + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15),
        rates=rng.uniform(1.0, 2.0, keys),
        node_ids=[f"node-{i}" for i in range(8)],
        q_cap=1000.0,
        slots_per_node=5,
    )
    after = replace(before, rates=before.rates * np.exp(0.5 * rng.standard_normal(keys)))
    previous = build_plan(before)
    free = replan(previous, after, tolerance=0.0)
    capped = replan(previous, after, tolerance=0.0, max_churn=0.1)
    assert not free.used_fresh and free.churn > 0.1  # the repair needs more than the cap
    assert capped.churn <= 0.1 and not capped.used_fresh
    assert capped.bound_met == (capped.imbalance <= capped.imbalance_bound * (1 + 1e-9))
