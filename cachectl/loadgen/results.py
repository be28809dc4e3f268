"""What one load run measured: a record per request and the summary the commands print.

Metrics are over the *measured* requests, those scheduled at or after the warm-up:

* ``ttft_p50_s`` / ``ttft_p99_s`` / ``ttft_mean_s``: time from the start of the request (its
  ``Route`` call) to the first streamed token, over requests that got one;
* ``hit_rate``: served, token-weighted: Σ ``usage.prompt_tokens_details.cached_tokens`` ÷ Σ
  ``usage.prompt_tokens`` over completed requests (what the engines reported);
* ``throughput_rps`` / ``output_tokens_per_s``: completed requests and their output tokens per
  second of the measured window (first to last measured start; an open loop offers ``qps`` over
  it, so throughput below the offered rate means failures);
* ``per_engine`` and ``imbalance``: requests per destination chosen by the routers, and
  max / mean over the destinations (the known ones when given, else the ones seen);
* ``reasons``: routing decisions by reason (``no_table``, ``warm``, ``tail``, ``p2c``, ...);
* ``errors``: by kind, ``route:<gRPC status>``, ``engine:http-<status>``, ``engine:<exception>``,
  ``timeout``; ``failed`` counts measured requests that ended with an error.
* ``schedule_lag_p99_s``: how late the generator started requests (a busy client shows here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(slots=True)
class Outcome:
    """One request's life as the load generator saw it (times: monotonic seconds)."""

    index: int
    key: str
    measured: bool
    scheduled: float  # when it was due
    started: float = 0.0
    routed: float = 0.0
    routed_unix: float = 0.0  # wall-clock time of the decision (for cross-process timelines)
    router: str = ""
    node_id: str = ""
    address: str = ""
    reason: str = ""
    generation: int = 0
    first_token: float = -1.0
    finished: float = -1.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return self.first_token - self.started if self.first_token >= 0 else None

    @property
    def completed(self) -> bool:
        return self.error is None and self.finished >= 0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default, as the simulator uses); 0 when empty."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


@dataclass
class Summary:
    requests: int
    completed: int
    failed: int
    hit_rate: float
    prompt_tokens: int
    cached_tokens: int
    ttft_p50_s: float
    ttft_p99_s: float
    ttft_mean_s: float
    route_p50_ms: float
    route_p99_ms: float
    throughput_rps: float
    output_tokens_per_s: float
    window_s: float
    imbalance: float
    per_engine: dict[str, int]
    reasons: dict[str, int]
    errors: dict[str, int]
    schedule_lag_p99_s: float
    generations: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "hit_rate": self.hit_rate,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "ttft_p50_s": self.ttft_p50_s,
            "ttft_p99_s": self.ttft_p99_s,
            "ttft_mean_s": self.ttft_mean_s,
            "route_p50_ms": self.route_p50_ms,
            "route_p99_ms": self.route_p99_ms,
            "throughput_rps": self.throughput_rps,
            "output_tokens_per_s": self.output_tokens_per_s,
            "window_s": self.window_s,
            "imbalance": self.imbalance,
            "per_engine": dict(sorted(self.per_engine.items())),
            "reasons": dict(sorted(self.reasons.items())),
            "errors": dict(sorted(self.errors.items())),
            "schedule_lag_p99_s": self.schedule_lag_p99_s,
            "generations": self.generations,
        }


def imbalance(counts: dict[str, int], nodes: Sequence[str] = ()) -> float:
    """max / mean of requests per destination (1.0 when nothing was routed)."""
    values = [counts.get(n, 0) for n in nodes] if nodes else list(counts.values())
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


def summarize(outcomes: Sequence[Outcome], nodes: Sequence[str] = ()) -> Summary:
    measured = [o for o in outcomes if o.measured]
    done = [o for o in measured if o.completed]
    ttfts = [t for o in measured if o.error is None and (t := o.ttft) is not None]
    routes = [(o.routed - o.started) * 1000.0 for o in measured if o.routed > 0]
    prompt = sum(o.prompt_tokens for o in done)
    cached = sum(o.cached_tokens for o in done)
    starts = [o.scheduled for o in measured]
    window = (
        (max(starts) - min(starts)) * len(starts) / (len(starts) - 1) if len(starts) > 1 else 0.0
    )
    per_engine = Counter(o.node_id for o in measured if o.node_id)
    for node in nodes:
        per_engine.setdefault(node, 0)
    errors = Counter(o.error for o in outcomes if o.error is not None)
    lags = [max(0.0, o.started - o.scheduled) for o in measured if o.started > 0]
    return Summary(
        requests=len(measured),
        completed=len(done),
        failed=sum(1 for o in measured if o.error is not None),
        hit_rate=cached / prompt if prompt else 0.0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        ttft_p50_s=percentile(ttfts, 50.0),
        ttft_p99_s=percentile(ttfts, 99.0),
        ttft_mean_s=float(np.mean(ttfts)) if ttfts else 0.0,
        route_p50_ms=percentile(routes, 50.0),
        route_p99_ms=percentile(routes, 99.0),
        throughput_rps=len(done) / window if window > 0 else 0.0,
        output_tokens_per_s=sum(o.output_tokens for o in done) / window if window > 0 else 0.0,
        window_s=window,
        imbalance=imbalance(dict(per_engine), nodes),
        per_engine=dict(per_engine),
        reasons=dict(Counter(o.reason for o in measured if o.reason)),
        errors=dict(errors),
        schedule_lag_p99_s=percentile(lags, 99.0),
        generations=sorted({o.generation for o in measured if o.routed > 0}),
    )
