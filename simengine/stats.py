"""An engine's counters and its TTFT histogram, in the units vLLM v1 exports them.

Counted when a request's first token comes out (its prompt has then been scheduled in full and
its cache hit is known): prompt tokens, prefix-cache queries (= prompt tokens) and hits (= cached
tokens), the TTFT observation. vLLM counts queries and hits when it schedules the request; for a
request that is admitted in one step the difference is the prefill time. Generation tokens are
counted per step (one per decoding request, one per first token).
"""

from __future__ import annotations

import bisect

# vLLM v1's buckets for vllm:time_to_first_token_seconds (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


class EngineStats:
    """Monotonic counters (never reset while the engine lives, also not by a cache reset)."""

    __slots__ = (
        "cache_resets",
        "generation_tokens",
        "lag_s",
        "prefix_hits",
        "prefix_queries",
        "prompt_tokens",
        "requests_finished",
        "resyncs",
        "ttft_buckets",
        "ttft_count",
        "ttft_sum",
    )

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.requests_finished = 0
        self.cache_resets = 0
        self.resyncs = 0  # times the step loop fell too far behind the wall clock
        self.lag_s = 0.0  # how late (wall seconds) the latest step started
        self.ttft_buckets = [0] * len(TTFT_BUCKETS)  # per bucket, not cumulative
        self.ttft_count = 0
        self.ttft_sum = 0.0

    def first_token(self, prompt: int, cached: int, ttft_s: float) -> None:
        self.prompt_tokens += prompt
        self.prefix_queries += prompt
        self.prefix_hits += cached
        self.ttft_count += 1
        self.ttft_sum += ttft_s
        index = bisect.bisect_left(TTFT_BUCKETS, ttft_s)
        if index < len(TTFT_BUCKETS):
            self.ttft_buckets[index] += 1

    def cumulative_buckets(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs ending with +Inf, as a Prometheus histogram has them."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip(TTFT_BUCKETS, self.ttft_buckets, strict=True):
            total += count
            out.append((repr(float(bound)), float(total)))
        out.append(("+Inf", float(self.ttft_count)))
        return out
