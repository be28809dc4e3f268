"""SLO capacity over a QPS ladder, per seed and across seeds (PAPER.md §4 "SLO capacity").

A rung *passes* an SLO when its p99 TTFT is ≤ the SLO, at most 5% of its requests failed, and the
run was not aborted (an early abort already showed p99 > the largest SLO). A seed's capacity is
the highest rung of the leading run of passing rungs, i.e. the rung below the first failure. A
pass above a failure (a non-monotone ladder, from noise near the knee) does not count and is
reported as ``non_monotone``: capacity is a load a deployment can rely on, and a noisy pass above
a failure is not one.

Censoring: when the lowest rung already fails, the capacity is below the ladder; it is recorded
as 0 and marked ``left``. When every rung passes it is at least the top rung; it is recorded as
the top rung and marked ``right``. A mean that includes a censored seed is a bound (an upper bound
for ``left``, a lower bound for ``right``) and the tables mark it.

Across seeds: mean and a 95% Student-t interval, mean ± t(0.975, n-1)·s/√n. The t quantiles are a
small table (scipy is not a dependency for one number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_FAILURES = 0.05

# Two-sided 95% Student-t quantiles t(0.975, df), df = 1..30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_T975_LARGE = ((40, 2.021), (60, 2.000), (120, 1.980))
_Z975 = 1.960


def t_quantile_975(df: int) -> float:
    """t(0.975, df) from the table; the next smaller tabulated df beyond 30 (conservative)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    value = _T975[-1]
    for limit, quantile in _T975_LARGE:
        if df >= limit:
            value = quantile
    return value if df < 1000 else _Z975


@dataclass(frozen=True)
class Rung:
    """What the capacity search needs from one run."""

    qps: float
    p99_s: float
    failures: float
    aborted: bool = False

    def passes(self, slo_s: float) -> bool:
        return not self.aborted and self.p99_s <= slo_s and self.failures <= MAX_FAILURES


@dataclass(frozen=True)
class Knee:
    """One seed's capacity at one SLO."""

    capacity: float
    censored: str | None  # "left", "right" or None
    non_monotone: bool


def knee(rungs: Sequence[Rung], slo_s: float) -> Knee:
    """Highest rung below the first failing one (see the module docstring)."""
    ordered = sorted(rungs, key=lambda r: r.qps)
    if not ordered:
        raise ValueError("empty ladder")
    capacity = 0.0
    first_fail = None
    for index, rung in enumerate(ordered):
        if not rung.passes(slo_s):
            first_fail = index
            break
        capacity = rung.qps
    if first_fail is None:
        return Knee(capacity, "right", False)
    non_monotone = any(r.passes(slo_s) for r in ordered[first_fail + 1 :])
    return Knee(capacity, "left" if first_fail == 0 else None, non_monotone)


@dataclass(frozen=True)
class Interval:
    """Mean over seeds with its 95% Student-t interval; ``censored`` lists the kinds present."""

    mean: float
    low: float
    high: float
    n: int
    censored: tuple[str, ...] = ()


def mean_ci95(values: Sequence[float], censored: Sequence[str | None] = ()) -> Interval:
    """Mean and 95% Student-t interval (the interval is the point itself for one value)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    kinds = tuple(sorted({c for c in censored if c}))
    if n == 1:
        return Interval(mean, mean, mean, 1, kinds)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile_975(n - 1) * math.sqrt(var / n)
    return Interval(mean, mean - half, mean + half, n, kinds)


def capacity_across_seeds(
    ladders: Sequence[Sequence[Rung]], slo_s: float
) -> tuple[Interval, list[Knee]]:
    """Each seed's knee at ``slo_s`` and their mean with its interval."""
    knees = [knee(ladder, slo_s) for ladder in ladders]
    interval = mean_ci95([k.capacity for k in knees], [k.censored for k in knees])
    return interval, knees


def format_interval(interval: Interval, digits: int = 0, lowest: float | None = None) -> str:
    """``mean ± half`` with censoring marks: ``≥`` right-, ``≤`` left-censored.

    When every seed is below the ladder (mean 0, left-censored) it reads ``<lowest``.
    """
    if lowest is not None and interval.mean == 0.0 and interval.censored == ("left",):
        return f"<{lowest:.{digits}f}"
    mark = ""
    if "right" in interval.censored:
        mark = "≥"
    if "left" in interval.censored:
        mark = "≤" if not mark else "~"
    half = (interval.high - interval.low) / 2
    return f"{mark}{interval.mean:.{digits}f} ± {half:.{digits}f}"
