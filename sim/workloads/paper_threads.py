"""The paper workload's conversation threads: how many turns, when each turn arrives.

Table 6: 2.64 requests per thread and 80.8% of requests in multi-turn threads. A thread has one
turn with probability 0.192 × 2.64 = 0.507, else 1 + Geometric(0.3007) turns (mean 4.33), which
meets both numbers exactly; consecutive turns are a lognormal think time apart. The stream is
stationary from t = 0: threads already under way at 0 are drawn size-biased by their span.
:mod:`sim.workloads.paper` turns these timelines into prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sim.workloads.blocks import I64

F64 = npt.NDArray[np.float64]

MEAN_THREAD = 2.64
MULTI_SHARE = 0.808
SINGLE_P = (1 - MULTI_SHARE) * MEAN_THREAD  # P(thread has one turn)
GEOM_P = (1 - SINGLE_P) / (MEAN_THREAD - 1)  # multi-turn threads: 1 + Geometric(GEOM_P) turns
SPAN_GUESS_S = 400.0  # ≈ E[thread span] = 1.64 turns × 211 s mean think; sizes a sample pool


def thread_lengths(rng: np.random.Generator, n: int) -> I64:
    """Turns per thread: 1 with probability SINGLE_P, else 1 + Geometric(GEOM_P)."""
    multi = rng.random(n) >= SINGLE_P
    return np.where(multi, 1 + rng.geometric(GEOM_P, n), 1).astype(np.int64)


@dataclass
class Threads:
    start: F64  # thread start time (s), may be < 0
    length: I64  # turns
    base: I64  # index of the thread's first turn in the flat turn arrays
    offset: F64  # per turn: time since the thread's start


def draw_threads(rng: np.random.Generator, n: int, think: tuple[float, float]) -> Threads:
    length = thread_lengths(rng, n)
    base = np.cumsum(length) - length
    gap = think[0] * np.exp(think[1] * rng.standard_normal(int(length.sum())))
    gap[base] = 0.0
    cum = np.cumsum(gap)
    offset = cum - np.repeat(cum[base], length)
    return Threads(np.zeros(n), length, base, offset)


def take(th: Threads, pick: I64) -> Threads:
    length = th.length[pick]
    base = np.cumsum(length) - length
    local = np.arange(int(length.sum())) - np.repeat(base, length)
    offset = th.offset[np.repeat(th.base[pick], length) + local]
    return Threads(th.start[pick], length, base, offset)


def threads(
    rng: np.random.Generator, rate: float, horizon_s: float, think: tuple[float, float]
) -> Threads:
    """Threads with a turn in [0, horizon): starts in [0, horizon) plus those under way at 0."""
    fresh = draw_threads(rng, int(rng.poisson(rate * horizon_s)), think)
    fresh.start = rng.uniform(0.0, horizon_s, len(fresh.length))
    # Under way at 0: start -a with 0 < a < span; by Poisson thinning their count is
    # Poisson(rate * E[span]) and their shapes are size-biased by span (importance resampling).
    pool = draw_threads(rng, max(4096, int(4 * rate * SPAN_GUESS_S)), think)
    span = pool.offset[pool.base + pool.length - 1]
    pick = rng.choice(len(span), int(rng.poisson(rate * span.mean())), p=span / span.sum())
    old = take(pool, pick.astype(np.int64))
    old.start = -rng.uniform(0.0, 1.0, len(pick)) * span[pick]
    length = np.concatenate((fresh.length, old.length))
    return Threads(
        start=np.concatenate((fresh.start, old.start)),
        length=length,
        base=np.cumsum(length) - length,
        offset=np.concatenate((fresh.offset, old.offset)),
    )
