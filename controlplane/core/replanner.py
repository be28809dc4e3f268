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

import heapq
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from controlplane.core.churn import Churn, churn, compare
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
REPAIR_TARGETS = 8  # least-loaded destinations considered per repair move
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


def _kept_members(
    previous: RoutingTable, node_ids: list[str], hashes: np.ndarray
) -> list[list[int]]:
    """Per admitted key: its previous members still in the pool (new indices), [] if new."""
    index = {node: i for i, node in enumerate(node_ids)}
    remap = np.array([index.get(n, -1) for n in previous.node_ids], dtype=np.int64)
    result: list[list[int]] = [[] for _ in range(hashes.shape[0])]
    if previous.num_keys == 0 or hashes.shape[0] == 0:
        return result
    rows = np.searchsorted(previous.key_hashes, hashes)
    rows = np.minimum(rows, previous.num_keys - 1)
    found = np.flatnonzero(previous.key_hashes[rows] == hashes)
    offsets = previous.set_offsets.astype(np.int64)
    members = remap[previous.set_members.astype(np.int64)]
    starts, ends = offsets[rows[found]].tolist(), offsets[rows[found] + 1].tolist()
    for j, a, b in zip(found.tolist(), starts, ends, strict=True):
        result[j] = [m for m in members[a:b].tolist() if m >= 0]
    return result


class _Placement:
    """Sets, per-destination warm loads and membership while the replan is assembled."""

    def __init__(self, rates: list[float], replicas: list[int], weights: list[float]) -> None:
        self.rates = rates
        self.replicas = replicas
        self.weights = weights
        self.load = [0.0] * len(weights)
        self.sets: list[list[int]] = [[] for _ in rates]
        self.on_node: list[set[int]] = [set() for _ in weights]
        self.prefer_small = True  # among sufficient moves, the smallest replica (else: lowest peak)

    def share(self, key: int) -> float:
        return self.rates[key] / self.replicas[key]

    def assign(self, key: int, members: list[int]) -> None:
        share = self.share(key)
        self.sets[key] = members
        for r in members:
            self.load[r] += share
            self.on_node[r].add(key)

    def keep(self, kept: list[list[int]]) -> list[int]:
        """Step 2; returns the keys left for step 3 (new or incomplete), in admission order."""
        rest = []
        for key, live in enumerate(kept):
            k = self.replicas[key]
            if len(live) >= k:
                chosen = live
                if len(live) > k:
                    chosen = sorted(live, key=lambda r: (self.load[r] / self.weights[r], r))[:k]
                self.assign(key, sorted(chosen))
            else:
                rest.append(key)
        return rest

    def place(self, keys: list[int], kept: list[list[int]]) -> None:
        """Step 3: LPT over the remaining keys, completing kept partial sets."""
        w = self.weights
        heap = [(load / w[r], r) for r, load in enumerate(self.load)]
        heapq.heapify(heap)
        for key in keys:
            members = list(kept[key])
            skipped = []
            while len(members) < self.replicas[key]:
                entry = heapq.heappop(heap)
                if entry[1] in members:
                    skipped.append(entry)
                else:
                    members.append(entry[1])
            share = self.share(key)
            for r in members:
                self.load[r] += share
                self.on_node[r].add(key)
            for r in members[len(kept[key]) :]:
                heapq.heappush(heap, (self.load[r] / w[r], r))
            for entry in skipped:
                heapq.heappush(heap, entry)
            # kept members' entries are stale-low: refresh them
            if kept[key]:
                heap = [(load / w[r], r) for r, load in enumerate(self.load)]
                heapq.heapify(heap)
            self.sets[key] = sorted(members)

    def _move(self, key: int, source: int, dest: int, changed: set[int]) -> None:
        share = self.share(key)
        self.load[source] -= share
        self.load[dest] += share
        self.on_node[source].discard(key)
        self.on_node[dest].add(key)
        self.sets[key] = sorted([r for r in self.sets[key] if r != source] + [dest])
        changed.add(key)

    def _best_move(
        self,
        top: int,
        norm: np.ndarray,
        targets: list[int],
        changed: set[int],
        limit: float,
        budget: int,
    ) -> tuple[int, int, float, int, int] | None:
        """(new churn, insufficient, score, key, dest) of the best single move off ``top``.

        Among moves of equal churn, one that brings both destinations within ``limit`` wins
        (the smallest such replica: it disturbs the least), else the one lowering the pair's
        peak most."""
        w = self.weights
        best: tuple[int, int, float, int, int] | None = None
        spare = budget - len(changed)
        for key in self.on_node[top]:
            if spare <= 0 and key not in changed:
                continue
            share = self.share(key)
            for dest in targets:
                if dest == top or dest in self.sets[key]:
                    continue
                peak = max(norm[top] - share / w[top], norm[dest] + share / w[dest])
                if peak >= norm[top]:
                    continue
                enough = peak <= limit
                rank = (
                    int(key not in changed),
                    int(not enough),
                    share if enough and self.prefer_small else peak,
                    key,
                    dest,
                )
                if best is None or rank < best:
                    best = rank
        return best

    def _best_swap(
        self, top: int, norm: np.ndarray, targets: list[int], changed: set[int], budget: int
    ) -> tuple[int, float, int, int, int] | None:
        """(new churn, peak, key on top, dest, key on dest) of the best exchange, if one helps:
        a replica too large to move alone trades places with a smaller one."""
        w = self.weights
        best: tuple[int, float, int, int, int] | None = None
        for key in self.on_node[top]:
            share = self.share(key)
            for dest in targets:
                if dest == top or dest in self.sets[key]:
                    continue
                for other in self.on_node[dest]:
                    delta = share - self.share(other)
                    if delta <= 0 or top in self.sets[other]:
                        continue
                    peak = max(norm[top] - delta / w[top], norm[dest] + delta / w[dest])
                    cost = int(key not in changed) + int(other not in changed)
                    if len(changed) + cost > budget:
                        continue
                    rank = (cost, peak, key, dest, other)
                    if peak < norm[top] and (best is None or rank < best):
                        best = rank
        return best

    def revert(
        self, limit: float, tail: list[float], kept: list[list[int]], changed: set[int]
    ) -> None:
        """Undo repair moves that later moves made unnecessary: a changed key whose previous
        (complete) set fits again within ``limit`` goes back to it, largest replicas first."""
        w = self.weights
        for key in sorted(changed, key=lambda k: -self.share(k)):
            old = sorted(kept[key])
            if len(old) != self.replicas[key] or self.sets[key] == old:
                continue
            share = self.share(key)
            leave = [r for r in self.sets[key] if r not in old]
            enter = [r for r in old if r not in self.sets[key]]
            if all((self.load[r] + tail[r] + share) / w[r] <= limit for r in enter):
                for r in leave:
                    self.load[r] -= share
                    self.on_node[r].discard(key)
                for r in enter:
                    self.load[r] += share
                    self.on_node[r].add(key)
                self.sets[key] = old

    def repair(
        self,
        limit: float,
        tail: list[float],
        changed: set[int],
        max_moves: int,
        budget: int | None = None,
    ) -> int:
        """Step 4; returns the number of moves and exchanges made. ``budget``: the most keys
        ``changed`` may hold (moves of keys already changed are free)."""
        cap = len(self.rates) if budget is None else budget
        w = self.weights
        moves = 0
        while moves < max_moves:
            norm = np.array([(a + t) / x for a, t, x in zip(self.load, tail, w, strict=True)])
            top = int(norm.argmax())
            if norm[top] <= limit:
                break
            targets = np.argsort(norm, kind="stable")[:REPAIR_TARGETS].tolist()
            move = self._best_move(top, norm, targets, changed, limit, cap)
            if move is not None:
                self._move(move[3], top, move[4], changed)
            else:
                swap = self._best_swap(top, norm, targets, changed, cap)
                if swap is None:
                    break
                _, _, key, dest, other = swap
                self._move(key, top, dest, changed)
                self._move(other, dest, top, changed)
            moves += 1
        return moves


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
        placement = _Placement(self.rates, self.replicas, w)
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
    kept = _kept_members(previous, list(plan.node_ids), admitted_hashes)
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
