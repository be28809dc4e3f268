"""Where admitted keys go: LPT (Algorithm 1, lines 4-6) and the paper's two ablations.

Each placement takes the admitted keys in admission order and the destinations' starting loads,
returns one sorted destination set per key and adds each key's rate to the loads it lands on,
so the planner can read the planned loads off the same list.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


def place_lpt(
    rates: Sequence[float], replicas: Sequence[int], initial_load: list[float], weights: list[float]
) -> list[list[int]]:
    """LPT (Algorithm 1, lines 4-6): each key's k_b least-loaded destinations; mutates loads."""
    heap = [(load / w, r) for r, (load, w) in enumerate(zip(initial_load, weights, strict=True))]
    heapq.heapify(heap)
    sets: list[list[int]] = []
    for rate, k in zip(rates, replicas, strict=True):
        chosen = [heapq.heappop(heap)[1] for _ in range(k)]
        share = rate / k
        for r in chosen:
            initial_load[r] += share
            heapq.heappush(heap, (initial_load[r] / weights[r], r))
        chosen.sort()
        sets.append(chosen)
    return sets


def place_hash(
    key_hashes: Sequence[int], rates: Sequence[float], loads: list[float]
) -> list[list[int]]:
    """affinity_only ablation: one destination per key, chosen by the key hash alone."""
    sets = [[int(h) % len(loads)] for h in key_hashes]
    for (r,), rate in zip(sets, rates, strict=True):
        loads[r] += rate
    return sets


def place_random(
    rates: Sequence[float], replicas: Sequence[int], loads: list[float], seed: int
) -> list[list[int]]:
    """replicate_random ablation: k_b distinct destinations drawn uniformly at random."""
    rng = np.random.default_rng(seed)
    sets: list[list[int]] = []
    for rate, k in zip(rates, replicas, strict=True):
        chosen = sorted(int(r) for r in rng.choice(len(loads), size=k, replace=False))
        for r in chosen:
            loads[r] += rate / k
        sets.append(chosen)
    return sets
