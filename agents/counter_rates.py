"""Counter deltas between two good scrapes → per-interval rates and the prefix hit rate.

Rules (docs/components/agents.md):

- The first good scrape has no interval: no hit rate from counters, throughput 0.
- A restart is any counter that went down, a new ``process_start_time_seconds``, or a change of
  dialect. That interval is skipped (hit rate absent, throughput 0) and the new values become
  the baseline: a rate is never negative and never spans two engine lifetimes.
- The hit rate is Δhits / Δqueries (tokens), clamped to [0, 1]; absent when Δqueries is 0.
- An engine without hit/query counters (vLLM V0, old SGLang) gives its own hit-rate gauge
  instead, when it lies in [0, 1] (vLLM V0 exports -1 with prefix caching off).
- A failed scrape does not move the baseline, so the next good scrape's interval covers the gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.dialects import EngineSample


@dataclass(frozen=True)
class IntervalRates:
    prefix_hit_rate: float | None = None
    prompt_tokens_per_s: float = 0.0
    generation_tokens_per_s: float = 0.0
    # The interval was skipped because the engine restarted (or changed dialect).
    reset: bool = False


NO_RATES = IntervalRates()


class RateTracker:
    """Holds the previous good scrape of one engine; :meth:`update` with each new one."""

    def __init__(self) -> None:
        self._previous: EngineSample | None = None
        self._previous_at = 0.0

    def update(self, sample: EngineSample, at_s: float) -> IntervalRates:
        """Rates over the interval ending with ``sample`` taken at monotonic time ``at_s``."""
        previous, previous_at = self._previous, self._previous_at
        self._previous, self._previous_at = sample, at_s
        if previous is None:
            return IntervalRates(prefix_hit_rate=_gauge(sample))
        if restarted(previous, sample):
            return IntervalRates(reset=True)
        elapsed = at_s - previous_at
        return IntervalRates(
            prefix_hit_rate=_hit_rate(previous, sample),
            prompt_tokens_per_s=_per_second(previous.prompt_tokens, sample.prompt_tokens, elapsed),
            generation_tokens_per_s=_per_second(
                previous.generation_tokens, sample.generation_tokens, elapsed
            ),
        )


def restarted(previous: EngineSample, current: EngineSample) -> bool:
    if previous.dialect != current.dialect:
        return True
    if (
        previous.process_start is not None
        and current.process_start is not None
        and previous.process_start != current.process_start
    ):
        return True
    pairs = (
        (previous.prefix_hits, current.prefix_hits),
        (previous.prefix_queries, current.prefix_queries),
        (previous.prompt_tokens, current.prompt_tokens),
        (previous.generation_tokens, current.generation_tokens),
    )
    return any(old is not None and new is not None and new < old for old, new in pairs)


def _hit_rate(previous: EngineSample, current: EngineSample) -> float | None:
    old_hits, old_queries = previous.prefix_hits, previous.prefix_queries
    new_hits, new_queries = current.prefix_hits, current.prefix_queries
    if new_hits is None or new_queries is None:
        return _gauge(current)  # no counters: the engine's own gauge, if any
    if old_hits is None or old_queries is None:
        return None  # counters just appeared: no interval yet
    queried = new_queries - old_queries
    if queried <= 0:
        return None
    return min(max((new_hits - old_hits) / queried, 0.0), 1.0)


def _gauge(sample: EngineSample) -> float | None:
    if sample.prefix_queries is not None:
        return None  # the engine has counters: a lifetime gauge would hide the interval
    gauge = sample.hit_rate_gauge
    return gauge if gauge is not None and 0.0 <= gauge <= 1.0 else None


def _per_second(old: float | None, new: float | None, elapsed_s: float) -> float:
    if old is None or new is None or elapsed_s <= 0:
        return 0.0
    return max(new - old, 0.0) / elapsed_s
