"""Read one Prometheus histogram off a scrape: cumulative bucket counts summed over replicas.

The agent forwards the engine's time-to-first-token histogram as it is (cumulative, since the
engine started) in ``NodeReport.ttft``; the control plane takes the deltas between reports
(:mod:`controlplane.core.ttft_window`), so a lost report loses no observations and a restart is seen
as a counter reset there. Replicas (vLLM's ``engine``, SGLang's ``dp_rank``) are summed per
bucket bound; copies of one scheduler's numbers (tensor-parallel ranks) are collapsed first, as
for every other metric (:func:`agents.exposition.collapse`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agents.exposition import Exposition, Series, collapse

# Engine TTFT histograms by dialect family (llama.cpp exports none).
VLLM_TTFT = "vllm:time_to_first_token_seconds"
SGLANG_TTFT = ("sglang:time_to_first_token_seconds", "sglang_time_to_first_token_seconds")
SUFFIXES = ("_bucket", "_sum", "_count")


def sample_names(family: str) -> list[str]:
    """The family name and its three sample names (what the agent's pre-filter must keep)."""
    return [family] + [family + s for s in SUFFIXES]


@dataclass(frozen=True)
class Histogram:
    """Cumulative: ``counts[i]`` observations were <= ``upper_bounds[i]``; ``count`` is +Inf."""

    upper_bounds: tuple[float, ...]
    counts: tuple[float, ...]
    count: float
    sum: float


def _bound(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def read_histogram(expo: Exposition, family: str) -> Histogram | None:
    """``family``'s histogram summed over replicas; None when the page has none of it."""
    by_bound: dict[float, list[Series]] = {}
    for series in expo.series(family + "_bucket"):
        bound = _bound(series.labels.get("le", ""))
        if bound is None:
            continue
        rest = {k: v for k, v in series.labels.items() if k != "le"}
        by_bound.setdefault(bound, []).append(Series(rest, series.value))
    if not by_bound:
        return None
    summed = {bound: math.fsum(collapse(group)) for bound, group in by_bound.items()}
    finite = sorted(b for b in summed if math.isfinite(b))
    count = expo.sum(family + "_count")
    if count is None:
        count = summed.get(math.inf, summed[finite[-1]] if finite else 0.0)
    # Cumulative counts never decrease with the bound; a torn scrape across replicas could make
    # them, so clamp to keep the quantile arithmetic sane.
    counts: list[float] = []
    running = 0.0
    for bound in finite:
        running = max(running, summed[bound])
        counts.append(running)
    return Histogram(
        upper_bounds=tuple(finite),
        counts=tuple(counts),
        count=max(count, running),
        sum=expo.sum(family + "_sum") or 0.0,
    )
