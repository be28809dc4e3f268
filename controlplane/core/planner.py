"""The CacheRoute planner: Algorithm 1 of the paper, exactly, plus the two ablation placements.

1. replica count  k_b = max(1, ceil(λ_b / q_cap)), at most R (a set cannot repeat a destination)
2. admission      keys by decreasing λ_b (ties: increasing key hash), admitted while Σ k_b ≤ R·W;
                  admission stops at the first key that does not fit, so every admitted key has a
                  rate ≥ every key left out. Keys with rate 0 are never admitted.
3. cold tail      L[r] = (rate not admitted) · w_r / Σ w  — the tail is spread by power-of-two
                  choices, i.e. evenly per unit of capacity
4. LPT            for each admitted key in admission order: the k_b destinations with the smallest
                  L[r] / w_r (ties: lowest index) get λ_b / k_b each

The cold tail adds the same normalised load (tail / Σ w) to every destination, so it cannot change
which destinations are smallest: LPT runs on the warm loads alone and the tail is added to the
planned loads afterwards. The result is Algorithm 1's, but it no longer depends on the last bits of
a floating-point total, whose rounding varies with input order (same inputs in any order → same
plan and content hash).

Only the top R·W keys by rate can be admitted (each takes at least one slot), so the planner
partitions instead of sorting all keys: O(|B| + C log C + Σ k_b log R) for C = R·W.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from controlplane.core.byte_admission import admit_by_bytes, place_best
from controlplane.core.placements import place_hash, place_lpt, place_random
from controlplane.core.plan_input import PlanError, PlanInput, check_input
from dataplane.core.table import (
    F64Array,
    KeyLabel,
    PlannerParams,
    PlanStats,
    RoutingTable,
    U64Array,
    make_table,
)

# The input and its validation live in plan_input; they stay importable from here.
__all__ = [
    "TOP_KEYS",
    "Admission",
    "PlanError",
    "PlanInput",
    "admit",
    "assemble_table",
    "build_plan",
    "byte_candidates",
    "check_input",
    "replica_counts",
]

TOP_KEYS = 100


@dataclass(frozen=True)
class Admission:
    """Admitted keys (indices into the input) in admission order, with their replica counts."""

    order: np.ndarray  # int64 indices into the input arrays
    replicas: np.ndarray  # int64 k_b, aligned with order
    slots_total: int


def replica_counts(rates: F64Array, q_cap: float, num_nodes: int) -> np.ndarray:
    """k_b = max(1, ceil(λ_b / q_cap)), capped at the number of destinations."""
    return np.clip(np.ceil(rates / q_cap), 1, num_nodes).astype(np.int64)


def admit(
    key_hashes: U64Array, rates: F64Array, q_cap: float, num_nodes: int, slots_total: int
) -> Admission:
    """Warm-set admission (Algorithm 1, lines 1-2)."""
    empty = np.zeros(0, dtype=np.int64)
    if slots_total <= 0:
        return Admission(empty, empty, slots_total)
    candidates = np.flatnonzero(rates > 0)
    if candidates.shape[0] > slots_total:
        candidate_rates = rates[candidates]
        kth = candidate_rates.shape[0] - slots_total
        threshold = np.partition(candidate_rates, kth)[kth]  # the C-th largest rate
        candidates = candidates[candidate_rates >= threshold]
    order = candidates[np.lexsort((key_hashes[candidates], -rates[candidates]))]
    replicas = replica_counts(rates[order], q_cap, num_nodes)
    admitted = int(np.searchsorted(np.cumsum(replicas), slots_total, side="right"))
    return Admission(order[:admitted], replicas[:admitted], slots_total)


def build_plan(plan: PlanInput, *, created_at_unix_ms: int | None = None) -> RoutingTable:
    """Run Algorithm 1 and return the validated routing table with its statistics."""
    started = time.perf_counter()
    weights = check_input(plan)
    num_nodes = len(plan.node_ids)
    rates = np.asarray(plan.rates, dtype=np.float64)
    total_rate = float(rates.sum())
    warm = [0.0] * num_nodes
    if plan.prefix_sizes is not None:
        admitted_hashes, admitted_rates, sets = _byte_aware(plan, weights, warm)
    else:
        admitted_hashes, admitted_rates, sets = _equal_slots(plan, weights, warm)
    table = assemble_table(
        plan,
        weights,
        admitted_hashes,
        admitted_rates,
        sets,
        warm,
        total_rate=total_rate,
        created_at_unix_ms=created_at_unix_ms or int(time.time() * 1000),
    )
    build_ms = (time.perf_counter() - started) * 1000.0
    return replace(table, stats=replace(table.stats, build_ms=build_ms))


def _equal_slots(
    plan: PlanInput, weights: list[float], warm: list[float]
) -> tuple[U64Array, list[float], list[list[int]]]:
    """Algorithm 1's admission into R·W equal slots and the placement ``plan`` names."""
    num_nodes = len(plan.node_ids)
    key_hashes = np.asarray(plan.key_hashes, dtype=np.uint64)
    rates = np.asarray(plan.rates, dtype=np.float64)
    slots_total = num_nodes * plan.slots_per_node
    if plan.placement == "hash":  # one slot per key: admission by rate alone
        admission = admit(key_hashes, rates, math.inf, num_nodes, slots_total)
    else:
        admission = admit(key_hashes, rates, plan.q_cap, num_nodes, slots_total)
    admitted_hashes = key_hashes[admission.order]
    admitted_rates = rates[admission.order].tolist()
    replicas = admission.replicas.tolist()
    if plan.placement == "lpt":
        sets = place_lpt(admitted_rates, replicas, warm, weights)
    elif plan.placement == "hash":
        sets = place_hash(admitted_hashes.tolist(), admitted_rates, warm)
    else:
        sets = place_random(admitted_rates, replicas, warm, plan.seed)
    return admitted_hashes, admitted_rates, sets


def _byte_aware(
    plan: PlanInput, weights: list[float], warm: list[float]
) -> tuple[U64Array, list[float], list[list[int]]]:
    """Byte-aware admission (``byte_rank``) and budget-respecting LPT (lpt placement only)."""
    assert plan.prefix_sizes is not None
    sizes = np.asarray(plan.prefix_sizes, dtype=np.float64)
    key_hashes = np.asarray(plan.key_hashes, dtype=np.uint64)
    rates = np.asarray(plan.rates, dtype=np.float64)
    candidates = byte_candidates(plan)
    order, placed = place_best(candidates, rates, sizes, warm, weights, plan.cache_budget)
    kept = [i for i, s in enumerate(placed) if s is not None]
    sets = [s for s in placed if s is not None]
    return key_hashes[order[kept]], rates[order[kept]].tolist(), sets


def byte_candidates(plan: PlanInput) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (order, replicas) admissions ``byte_rank`` places: its own, or for ``"best"`` rate per
    byte, rate, and Algorithm 1's equal slots (without the keys larger than a destination's
    budget, which fit nowhere and would only inflate the balance cap)."""
    assert plan.prefix_sizes is not None
    sizes = np.asarray(plan.prefix_sizes, dtype=np.float64)
    key_hashes = np.asarray(plan.key_hashes, dtype=np.uint64)
    rates = np.asarray(plan.rates, dtype=np.float64)
    nodes = len(plan.node_ids)
    ranks = ("rate_per_byte", "rate") if plan.byte_rank == "best" else (plan.byte_rank,)
    candidates = [
        admit_by_bytes(key_hashes, rates, sizes, plan.q_cap, nodes, plan.cache_budget, rank)
        for rank in ranks
    ]
    if plan.byte_rank == "best":  # Algorithm 1's own admission, within the byte budgets
        slots = admit(key_hashes, rates, plan.q_cap, nodes, nodes * plan.slots_per_node)
        fits = sizes[slots.order] <= plan.cache_budget
        candidates.append((slots.order[fits], slots.replicas[fits]))
    return candidates


def assemble_table(
    plan: PlanInput,
    weights: list[float],
    admitted_hashes: U64Array,
    admitted_rates: list[float],
    sets: list[list[int]],
    warm: list[float],
    *,
    total_rate: float,
    created_at_unix_ms: int,
) -> RoutingTable:
    """The validated table and its statistics from admitted keys (in admission order), their
    destination sets and the destinations' warm loads; shared by the planner and the replanner."""
    num_nodes = len(plan.node_ids)
    slots_total = num_nodes * plan.slots_per_node
    tail_rate = max(0.0, total_rate - math.fsum(admitted_rates))
    weight_sum = math.fsum(weights)
    loads = [load + tail_rate * w / weight_sum for load, w in zip(warm, weights, strict=True)]

    by_hash = np.argsort(admitted_hashes, kind="stable")
    sorted_hashes = admitted_hashes[by_hash]
    repeated = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1])
    if repeated.size:  # only admitted keys are checked: a full uniqueness pass would sort |B|
        raise PlanError(
            f"key_hashes repeat {int(sorted_hashes[repeated[0]])}; a key is listed once"
        )
    sizes = np.array([len(s) for s in sets], dtype=np.uint32)[by_hash]
    offsets = np.zeros(len(sets) + 1, dtype=np.uint32)
    np.cumsum(sizes, out=offsets[1:])
    members = np.fromiter(
        (m for i in by_hash.tolist() for m in sets[i]), dtype=np.uint16, count=int(offsets[-1])
    )
    normalised = [load / w for load, w in zip(loads, weights, strict=True)]
    mean = math.fsum(normalised) / num_nodes
    stats = PlanStats(
        num_keys=int(plan.rates.shape[0]),
        admitted_keys=len(sets),
        total_rate=total_rate,
        admitted_rate_share=(math.fsum(admitted_rates) / total_rate) if total_rate > 0 else 0.0,
        slots_used=int(sizes.sum()),
        slots_total=slots_total,
        max_replicas=int(sizes.max()) if len(sets) else 0,
        planned_load=tuple(loads),
        planned_imbalance=(max(normalised) / mean) if mean > 0 else 1.0,
        tail_rate=tail_rate,
    )
    top_hashes = admitted_hashes[:TOP_KEYS].tolist()
    top_keys = [
        KeyLabel(h, plan.key_labels.get(h, ""), rate)
        for h, rate in zip(top_hashes, admitted_rates[:TOP_KEYS], strict=True)
    ]
    params = PlannerParams(
        q_cap=plan.q_cap,
        slots_per_node=plan.slots_per_node,
        placement=plan.placement,
        node_weights=tuple(plan.node_weights),
        seed=plan.seed if plan.placement == "random" else 0,
    )
    table = make_table(
        pool=plan.pool,
        node_ids=list(plan.node_ids),
        key_hashes=sorted_hashes,
        set_offsets=offsets,
        set_members=members,
        params=params,
        created_at_unix_ms=created_at_unix_ms,
        stats=stats,
        top_keys=top_keys,
    )
    return table
