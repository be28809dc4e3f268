"""The routing core's benchmark workload: unique key hashes with lognormal rates of a given Gini.

Shared by ``bench_core.py`` and ``bench_replanner.py`` so that the planner is timed on the same
skew everywhere (the paper's Gini 0.756, σ calibrated per sample, 80 % of the cluster's capacity).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

PAPER_KEYS, GINI, Q_CAP, UTILISATION = 128_824, 0.756, 4.0, 0.8
F64 = npt.NDArray[np.float64]
U64 = npt.NDArray[np.uint64]


def gini(values: F64, *, ordered: bool = False) -> float:
    x = values if ordered else np.sort(values)
    n = x.shape[0]
    return float(2.0 * np.dot(np.arange(1, n + 1), x) / (n * x.sum()) - (n + 1) / n)


def calibrate_sigma(z: F64, target: float = GINI) -> float:
    """σ such that exp(σ·z) has the target Gini (monotone in σ; z sorted once, so no re-sort)."""
    ordered = np.sort(z)
    low, high = 0.1, 4.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (
            (mid, high) if gini(np.exp(mid * ordered), ordered=True) < target else (low, mid)
        )
    return (low + high) / 2


def workload(n: int, num_nodes: int, seed: int) -> tuple[U64, F64, float]:
    """Unique random key hashes, Gini-0.756 lognormal rates summing to 0.8 · R · q_cap, and σ."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    while np.unique(hashes).shape[0] != n:  # practically never; keeps the input valid
        hashes = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    z = rng.standard_normal(n)
    sigma = calibrate_sigma(z)
    rates = np.exp(sigma * z)
    rates *= UTILISATION * num_nodes * Q_CAP / rates.sum()
    return hashes, rates, sigma


def describe(rates: F64) -> dict[str, float]:
    ordered = np.sort(rates)[::-1]
    top = max(1, int(0.04 * ordered.shape[0]))
    return {
        "gini": gini(rates),
        "top4_share": float(ordered[:top].sum() / ordered.sum()),
        "max_share": float(ordered[0] / ordered.sum()),
    }
