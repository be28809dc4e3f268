"""Business-key popularity: the paper's 128,824 keys with a target Gini and top share.

The paper (Table 6) gives four facts about per-key traffic: 128,824 keys, Gini 0.756, the top 4%
of keys carry ≈ 47% of requests, and the largest key carries < 0.3%. A plain lognormal fitted to
the Gini alone puts only 45.8% on the top 4%, so the population is a *skewed* lognormal:

    log w_i = σ·z_i + β·z_i²,   z_i = Φ⁻¹((i + 1) / (N + 1))   (deterministic quantiles)

with (σ, β) solved by :func:`fit_shape` so that the Gini is 0.756 and the top-4% share is 47.0%
exactly, and each key's share capped at 0.25% (the plain lognormal's natural maximum; the cap binds
on the top key only and keeps it under the paper's 0.3% bound). The weights are
quantiles, not samples, so the population is the same in every run and seed; randomness enters
only in which key each request belongs to.

Keys are named ``biz-000000`` (most popular) to ``biz-128823`` and hashed with the one key hash
(``dataplane.core.keys.hash_key``), so a plan built in the simulator routes the same keys a
router would.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from dataplane.core.keys import hash_key
from sim.workloads.stats import gini, top_share

F64 = npt.NDArray[np.float64]

PAPER_KEYS = 128_824
PAPER_GINI = 0.756
PAPER_TOP_FRACTION = 0.04
PAPER_TOP_SHARE = 0.47
PAPER_MAX_SHARE = 0.0025  # the cap; the paper's bound is < 0.3%
# fit_shape(PAPER_KEYS, PAPER_GINI, PAPER_TOP_FRACTION, PAPER_TOP_SHARE, PAPER_MAX_SHARE)
PAPER_SIGMA = 1.5730520707
PAPER_BETA = 0.0314913361


class PopularityError(ValueError):
    """An impossible population request (top_k out of range, unreachable Gini)."""


@functools.cache
def _quantiles(n: int) -> F64:
    """Standard-normal quantiles at (i + 1) / (n + 1), ascending."""
    inv = NormalDist().inv_cdf
    return np.array([inv((i + 1) / (n + 1)) for i in range(n)], dtype=np.float64)


def shape_weights(n: int, sigma: float, beta: float, cap: float) -> F64:
    """Normalised skewed-lognormal weights, ascending, each share capped at ``cap``."""
    z = _quantiles(n)
    w: F64 = np.exp(sigma * z + beta * z * z - (sigma * z[-1] + beta * z[-1] ** 2))
    w /= w.sum()
    while w[-1] > cap * (1 + 1e-12):  # capping renormalises the rest up; converges in a few steps
        w = np.minimum(w, cap)
        w /= w.sum()
    return w


def fit_shape(
    n: int, target_gini: float, fraction: float, target_top: float, cap: float
) -> tuple[float, float]:
    """Solve (σ, β) by nested bisection: σ for the Gini, β for the top share."""

    def sigma_for(beta: float) -> float:
        lo, hi = 0.05, 4.0
        for _ in range(40):
            mid = (lo + hi) / 2
            below = gini(shape_weights(n, mid, beta, cap)) < target_gini
            lo, hi = (mid, hi) if below else (lo, mid)
        return (lo + hi) / 2

    lo, hi = -0.1, 0.2
    for _ in range(30):
        mid = (lo + hi) / 2
        share = top_share(shape_weights(n, sigma_for(mid), mid, cap), fraction)
        lo, hi = (mid, hi) if share < target_top else (lo, mid)
    beta = (lo + hi) / 2
    return sigma_for(beta), beta


@dataclass(frozen=True, eq=False)
class Population:
    """Keys in decreasing popularity, their hashes and traffic shares (summing to 1)."""

    names: tuple[str, ...]
    hashes: tuple[int, ...]
    weights: F64

    def __len__(self) -> int:
        return len(self.names)


@functools.cache
def paper_weights() -> F64:
    """The paper population's shares, most popular first."""
    w = shape_weights(PAPER_KEYS, PAPER_SIGMA, PAPER_BETA, PAPER_MAX_SHARE)[::-1].copy()
    w.setflags(write=False)
    return w


def key_name(rank: int) -> str:
    """The business key of the ``rank``-th most popular key (0-based)."""
    return f"biz-{rank:06d}"


@functools.cache
def paper_active_set(top_k: int | None) -> Population:
    """The top-``top_k`` keys (all keys when None), shares renormalised over the active set."""
    n = PAPER_KEYS if top_k is None else top_k
    if not 1 <= n <= PAPER_KEYS:
        raise PopularityError(f"top_k must be in 1..{PAPER_KEYS} (or None for all); got {top_k}")
    w = paper_weights()[:n].copy()
    w /= w.sum()
    w.setflags(write=False)
    names = tuple(key_name(i) for i in range(n))
    return Population(names=names, hashes=tuple(hash_key(k) for k in names), weights=w)
