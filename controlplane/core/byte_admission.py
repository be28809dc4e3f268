"""Byte-aware admission and placement: warm-set admission by rate per cache byte.

Algorithm 1 admits keys by rate into C = R·W equal slots, which assumes similar reusable-prefix
sizes (the paper says so). When each key's reusable-prefix size s_b is known, a slot is the wrong
unit: one key with a 20K-token context costs the cache what a hundred 200-token keys cost. Here:

1. replicas   k_b = max(1, ceil(λ_b / q_cap)), at most R (as Algorithm 1);
2. admission  keys by decreasing λ_b / s_b (warm requests per cache byte; ties: increasing key
              hash), or with ``rank="rate"`` by decreasing λ_b (a hit saves s_b tokens, so the
              prefill saved per cache byte is λ_b itself), are admitted while the bytes they
              pin, Σ k_b · s_b, fit the pool's budget R · B; a key that does not fit is skipped
              and smaller ones still tried (greedy knapsack). With equal sizes s, B = W · s and
              every k_b = 1 this admits Algorithm 1's keys;
3. placement  LPT as Algorithm 1, in decreasing λ_b, onto the k_b least-loaded destinations that
              still have s_b bytes of their budget B free and whose warm load ÷ weight stays
              within (1 + ε) × (admitted rate ÷ Σ weights), ε = ``BALANCE_SLACK``; a key with
              fewer than k_b such destinations is left to the cold tail (spread by power-of-two
              choices). Without the load cap, per-destination byte budgets force late keys onto
              loaded destinations and the plan loses the balance that makes LPT pay.

**The planner's objective and ``rank="best"``.** A warm key's hit saves its prefix's prefill, so
the plan's value is the prefill it saves per second, J = Σ λ_b · s_b over the keys it places.
Ranking by rate per byte maximises warm *requests*, not J, and on a mix of mostly small prefixes
it drops the large ones whose hits save most (docs/results.md). ``rank="best"`` places three
admissions, by rate per byte, by rate, and Algorithm 1's equal slots (within the same byte
budgets), and keeps the one with the highest J (ties: that order), so on its own objective it is
never worse than equal slots.

Units are the caller's (bytes or tokens), the same for sizes and budget. Pure: numpy and heapq.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from dataplane.core.table import F64Array, U64Array

BALANCE_SLACK = 0.05
BYTE_RANKS = ("rate_per_byte", "rate", "best")


def admit_by_bytes(
    key_hashes: U64Array,
    rates: F64Array,
    sizes: F64Array,
    q_cap: float,
    num_nodes: int,
    budget_per_node: float,
    rank: str = "rate_per_byte",
) -> tuple[np.ndarray, np.ndarray]:
    """Step 2: admitted indices in decreasing rate (placement order) and their replica counts.
    A key larger than one destination's budget fits nowhere and is never admitted."""
    candidates = np.flatnonzero((rates > 0) & (sizes <= budget_per_node))
    density = (
        rates[candidates] / sizes[candidates] if rank == "rate_per_byte" else rates[candidates]
    )
    order = candidates[np.lexsort((key_hashes[candidates], -density))]
    replicas = np.clip(np.ceil(rates[order] / q_cap), 1, num_nodes).astype(np.int64)
    cost = (replicas * sizes[order]).tolist()
    budget = budget_per_node * num_nodes
    keep = np.zeros(order.shape[0], dtype=bool)
    used = 0.0
    for i, c in enumerate(cost):
        if used + c <= budget:
            used += c
            keep[i] = True
    admitted, counts = order[keep], replicas[keep]
    by_rate = np.lexsort((key_hashes[admitted], -rates[admitted]))
    return admitted[by_rate], counts[by_rate]


def place_lpt_bytes(
    rates: list[float],
    replicas: list[int],
    sizes: list[float],
    loads: list[float],
    weights: list[float],
    budget_per_node: float,
    load_cap: float = math.inf,
) -> list[list[int] | None]:
    """Step 3: each key's k_b least-loaded destinations with room whose load ÷ weight stays
    within ``load_cap``; None when too few qualify (the key joins the cold tail)."""
    free = [budget_per_node] * len(loads)
    heap = [(load / w, r) for r, (load, w) in enumerate(zip(loads, weights, strict=True))]
    heapq.heapify(heap)
    sets: list[list[int] | None] = []
    for rate, k, size in zip(rates, replicas, sizes, strict=True):
        chosen: list[int] = []
        full: list[tuple[float, int]] = []
        while heap and len(chosen) < k:
            entry = heapq.heappop(heap)
            r = entry[1]
            if free[r] >= size and (loads[r] + rate / k) / weights[r] <= load_cap:
                chosen.append(entry[1])
            else:
                full.append(entry)
        for entry in full:
            heapq.heappush(heap, entry)
        if len(chosen) < k:
            for r in chosen:
                heapq.heappush(heap, (loads[r] / weights[r], r))
            sets.append(None)
            continue
        for r in chosen:
            loads[r] += rate / k
            free[r] -= size
            heapq.heappush(heap, (loads[r] / weights[r], r))
        sets.append(sorted(chosen))
    return sets


def check_sizes(sizes: F64Array, num_keys: int, budget_per_node: float) -> str | None:
    """The problem with byte-aware inputs, or None."""
    if sizes.shape != (num_keys,):
        return f"{sizes.shape[0] if sizes.ndim else 0} prefix sizes for {num_keys} keys"
    if sizes.size and not (np.all(np.isfinite(sizes)) and sizes.min() > 0):
        return "prefix sizes must be finite and > 0"
    if not (math.isfinite(budget_per_node) and budget_per_node > 0):
        return f"cache_budget must be a positive number, got {budget_per_node}"
    return None


def saved_prefill(rates: F64Array, sizes: F64Array, placed: list[list[int] | None]) -> float:
    """J: Σ rate × prefix size over the keys that were placed (the module docstring)."""
    return math.fsum(
        float(r) * float(z) for r, z, p in zip(rates, sizes, placed, strict=True) if p is not None
    )


def place_best(
    candidates: list[tuple[np.ndarray, np.ndarray]],
    rates: F64Array,
    sizes: F64Array,
    warm: list[float],
    weights: list[float],
    budget_per_node: float,
) -> tuple[np.ndarray, list[list[int] | None]]:
    """Place each (order, replicas) admission (step 3, with the balance cap) and keep the one
    with the highest J; ``warm`` gets that placement's loads. Returns (order, sets)."""
    best: tuple[float, np.ndarray, list[list[int] | None], list[float]] | None = None
    for order, replicas in candidates:
        loads = list(warm)
        admitted = rates[order]
        cap = (1 + BALANCE_SLACK) * float(admitted.sum()) / math.fsum(weights)
        placed = place_lpt_bytes(
            admitted.tolist(), replicas.tolist(), sizes[order].tolist(), loads, weights,
            budget_per_node, cap,
        )  # fmt: skip
        value = saved_prefill(admitted, sizes[order], placed)
        if best is None or value > best[0]:
            best = (value, order, placed, loads)
    assert best is not None, "at least one admission to place"
    warm[:] = best[3]
    return best[1], best[2]
