"""Churn-aware replanning: the next plan from the active one and new rates, moving few keys.

A fresh plan (Algorithm 1) is a pure function of the rates, so small rate drift reshuffles the LPT
order and moves almost every key (the paper measured 94.5% per interval), and every moved key
re-prefills on a cold destination. The replanner keeps what still fits:

1. **Admission** is Algorithm 1's (same warm set, same replica counts k_b): which keys are warm is
   a question of rate, not of placement, and it keeps the cold tail identical to the fresh plan's.
2. **Keep**: every admitted key that the active plan already placed keeps its destinations that
   are still in the pool. With more live members than k_b it keeps the k_b least loaded (at that
   point, in admission order); with fewer it keeps them all and step 3 completes its set.
3. **Place the rest by LPT**: new keys and incomplete sets, in admission order, get the least
   loaded destinations not already in their set.
4. **Repair**: while the planned imbalance (max/mean of load ÷ weight, the planner's) exceeds
   ``(1 + tolerance)`` × the fresh plan's, move one replica from the most loaded destination to
   one of the least loaded: keys already changed first (moving them again costs no churn), then
   the move that lowers the pair's maximum most; when no single replica fits the gap, exchange a
   larger replica on it with a smaller one on a lightly loaded destination. A move or exchange is
   taken only when it lowers the pair's maximum below the top load, and the loop is capped.
   Then a changed key whose previous set fits again within the bound goes back to it (an early
   move that later moves made unnecessary costs no churn).
5. **Never worse than fresh**: if the bound is still missed, or the result churns more than the
   fresh plan would, the fresh plan is returned (``used_fresh``).

**Churn cap** (``max_churn``, e.g. 0.10): the repair may change at most
``⌊max_churn · |keys in either plan|⌋`` keys in all, counting the keys that admission forces
(keys joining or leaving the warm set, changed replica counts) first; a move of a key already
changed is free, an exchange costs its two keys. Within that budget the repair works as above.
If the bound is still missed, the capped plan is returned anyway with ``bound_met = False``
(the cap wins: falling back to fresh would churn ~95%). With a cap, when the repair moved
anything, it is run again taking, among moves of equal cost, the one that lowers the peak most
(it spends a tight budget better on some drifts), and the better plan (bound met, then lower churn,
then lower imbalance) is kept. So the churn is at most
``max(max_churn, forced share)`` whatever the drift; when admission is stable (no key joins or
leaves, replica counts unchanged) that is ``max_churn``.

Churn is :func:`controlplane.core.churn.churn` (1 − unchanged / keys in either plan). Cost: the
fresh plan, O(C) Python steps for keep/place over the C = R·W admitted keys and O(moves · W) for the
repair. Pure: numpy and the planner, no I/O.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from controlplane.core.churn import Churn, churn, compare
from controlplane.core.placement_repair import Placement, kept_members
from controlplane.core.planner import (
    PlanError,
    PlanInput,
    admit,
    assemble_table,
    build_plan,
    check_input,
)
from dataplane.core.table import RoutingTable

DEFAULT_TOLERANCE = 0.05
DEFAULT_MAX_CHURN = 0.10  # the acceptance: at most 10% of keys change set per interval
MAX_MOVES_PER_KEY = 4  # the repair loop's cap: this many moves per admitted key


@dataclass(frozen=True)
class Replan:
    """The chosen plan and how it compares with the fresh plan."""

    table: RoutingTable
    churn: float  # vs the previous plan; 1.0 for a first plan
    fresh_churn: float
    imbalance: float
    fresh_imbalance: float
    imbalance_bound: float
    kept_keys: int  # admitted keys whose set is unchanged from the previous plan
    repair_moves: int
    used_fresh: bool
    bound_met: bool = True
    max_churn: float | None = None


@dataclass(frozen=True)
class _Setup:
    """What the keep, place and repair steps start from (one replan may run them twice)."""

    plan: PlanInput
    weights: list[float]
    hashes: np.ndarray
    rates: list[float]
    replicas: list[int]
    kept: list[list[int]]
    bound: float
    total_rate: float
    created: int

    def run(self, prefer_small: bool, cap: int | None) -> tuple[RoutingTable, int]:
        """Steps 2-4 (with at most ``cap`` changed keys); the table and the repair's moves."""
        w, kept = self.weights, self.kept
        placement = Placement(self.rates, self.replicas, w)
        placement.prefer_small = prefer_small
        placement.place(placement.keep(kept), kept)
        tail_rate = max(0.0, self.total_rate - math.fsum(self.rates))
        weight_sum = math.fsum(w)
        tail = [tail_rate * x / weight_sum for x in w]
        mean = (math.fsum(placement.load) + tail_rate) / weight_sum
        changed = {k for k, s in enumerate(placement.sets) if s != sorted(kept[k])}
        limit = self.bound * mean * (1 - 1e-12)
        budget = None if cap is None else max(len(changed), cap)
        moves = placement.repair(limit, tail, changed, MAX_MOVES_PER_KEY * len(self.rates), budget)
        placement.revert(limit, tail, kept, changed)
        table = assemble_table(
            self.plan, w, self.hashes, self.rates, placement.sets, placement.load,
            total_rate=self.total_rate, created_at_unix_ms=self.created,
        )  # fmt: skip
        return table, moves


def replan(
    previous: RoutingTable | None,
    plan: PlanInput,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    created_at_unix_ms: int | None = None,
    max_churn: float | None = None,
) -> Replan:
    """The churn-aware plan for ``plan``'s rates given the ``previous`` one (see the module)."""
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise PlanError(f"tolerance must be a number >= 0, got {tolerance}")
    if max_churn is not None and not (math.isfinite(max_churn) and 0 <= max_churn <= 1):
        raise PlanError(f"max_churn must be within [0, 1], got {max_churn}")
    if plan.placement != "lpt":
        raise PlanError(f"churn-aware replanning needs placement lpt, got {plan.placement!r}")
    started = time.perf_counter()
    created = created_at_unix_ms or int(time.time() * 1000)
    fresh = build_plan(plan, created_at_unix_ms=created)
    fresh_churn = churn(previous, fresh)
    bound = fresh.stats.planned_imbalance * (1.0 + tolerance)

    def fresh_result() -> Replan:
        return Replan(
            fresh, fresh_churn, fresh_churn, fresh.stats.planned_imbalance,
            fresh.stats.planned_imbalance, bound, 0, 0, True, max_churn=max_churn,
        )  # fmt: skip

    if previous is None or previous.num_keys == 0 or plan.prefix_sizes is not None:
        return fresh_result()  # byte-aware admission is not replanned churn-aware (yet)
    weights = check_input(plan)
    key_hashes = np.asarray(plan.key_hashes, dtype=np.uint64)
    rates = np.asarray(plan.rates, dtype=np.float64)
    num_nodes = len(plan.node_ids)
    admission = admit(key_hashes, rates, plan.q_cap, num_nodes, num_nodes * plan.slots_per_node)
    admitted_hashes = key_hashes[admission.order]
    admitted_rates = rates[admission.order].tolist()
    kept = kept_members(previous, list(plan.node_ids), admitted_hashes)
    setup = _Setup(plan, weights, admitted_hashes, admitted_rates, admission.replicas.tolist(),
                   kept, bound, float(rates.sum()), created)  # fmt: skip
    either = np.union1d(previous.key_hashes, admitted_hashes).shape[0]
    left = either - admitted_hashes.shape[0]  # warm before, not now: churned regardless
    cap = None if max_churn is None else math.floor(max_churn * either + 1e-9) - left

    def attempt(prefer_small: bool) -> tuple[RoutingTable, Churn, int]:
        table, moves = setup.run(prefer_small, cap)
        return table, compare(previous, table), moves

    def rank(found: tuple[RoutingTable, Churn, int]) -> tuple[bool, float, float]:
        imbalance = found[0].stats.planned_imbalance
        return imbalance > bound * (1 + 1e-9), found[1].churn, imbalance

    # With a cap, also try the repair that takes the move lowering the peak most (it spends a
    # tight budget better on some drifts) and keep the better plan.
    tries = [attempt(True)]
    if max_churn is not None and tries[0][2] > 0:  # only a repair can differ
        tries.append(attempt(False))
    table, comparison, moves = min(tries, key=rank)
    replanned_churn = comparison.churn
    imbalance = table.stats.planned_imbalance
    bound_met = imbalance <= bound * (1 + 1e-9)
    if replanned_churn > fresh_churn or (not bound_met and max_churn is None):
        return fresh_result()
    kept_keys = comparison.unchanged
    build_ms = (time.perf_counter() - started) * 1000.0
    table = replace(table, stats=replace(table.stats, build_ms=build_ms))
    return Replan(
        table, replanned_churn, fresh_churn, imbalance, fresh.stats.planned_imbalance, bound,
        kept_keys, moves, False, bound_met, max_churn,
    )  # fmt: skip
