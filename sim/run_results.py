"""What one run reports, computed over the measured requests (those arriving after warm-up).

* ``kv_hit``: served, token-weighted: cached prompt tokens / prompt tokens over the measured
  requests that got their first token.
* ``ttft_p50_s`` / ``ttft_p99_s``: over every measured request. A request still without a first
  token when the run stopped (timed out, refused, or cut off by an early abort) enters with a lower
  bound, its wait so far; when such a bound can reach the percentile, the value is a lower bound
  and ``p99_censored`` is set.
* ``failures``: the share of measured requests whose TTFT exceeds the timeout or that never got a
  first token.
* ``imbalance``: max/mean over destinations of the measured requests each received, i.e. of load
  in the planner's unit (requests/s). ``imbalance_busy`` is the same ratio of busy GPU seconds
  (steps' modelled durations) and ``imbalance_prefill`` of prefill GPU seconds, both inside the
  measurement window; busy time saturates near 1 once every destination always has a decode
  running, which is why it is not the headline number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from sim.cluster_types import ClusterConfig
from sim.node import Job, Node
from sim.types import SimRequest


class FinishedRun(Protocol):
    """What a summary reads of a finished run (:class:`sim.cluster.Cluster` is one)."""

    config: ClusterConfig
    requests: Sequence[SimRequest]
    jobs: list[Job]
    nodes: list[Node]
    routed: list[int]
    snapshots: int
    aborted: bool
    end_s: float


@dataclass(frozen=True)
class RunMetrics:
    requests: int  # measured requests
    requests_total: int  # including warm-up
    served: int
    kv_hit: float
    prompt_tokens: int
    cached_tokens: int
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    p99_censored: bool
    failures: float
    imbalance: float
    imbalance_busy: float
    imbalance_prefill: float
    aborted: bool
    sim_end_s: float
    snapshots: int
    evictions: int
    refused: int = 0  # measured requests whose KV footprint exceeds a whole cache (never served)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_max_mean(values: list[float]) -> float:
    """max/mean, 1.0 for an all-zero vector (nothing to be imbalanced about)."""
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


def summarize(cluster: FinishedRun, measured: int) -> RunMetrics:
    config = cluster.config
    end = cluster.end_s
    timeout = config.timeout_s
    waits: list[float] = []
    bounds: list[float] = []
    prompt = cached = failed = 0
    for job in cluster.jobs:
        if job.arrival < config.warmup_s:
            continue
        if job.first_token >= 0.0:
            ttft = job.first_token - job.arrival
            waits.append(ttft)
            prompt += job.prompt
            cached += job.cached
            if ttft > timeout:
                failed += 1
        else:
            bounds.append(max(0.0, end - job.arrival))
            failed += 1
    served = len(waits)
    # Requests an early abort never reached are left out of the percentiles (censored anyway).
    values = np.asarray(waits + bounds, dtype=np.float64)
    if values.size:
        p50, p99 = (float(x) for x in np.percentile(values, [50.0, 99.0]))
        mean = float(values.mean())
    else:
        p50 = p99 = mean = 0.0
    censored = (bool(bounds) and min(bounds) <= p99) or cluster.aborted
    nodes = cluster.nodes
    return RunMetrics(
        requests=measured,
        requests_total=len(cluster.requests),
        served=served,
        kv_hit=cached / prompt if prompt else 0.0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        ttft_mean_s=mean,
        ttft_p50_s=p50,
        ttft_p99_s=p99,
        p99_censored=censored,
        failures=failed / measured if measured else 0.0,
        imbalance=ratio_max_mean([float(x) for x in cluster.routed]),
        imbalance_busy=ratio_max_mean([n.busy_s for n in nodes]),
        imbalance_prefill=ratio_max_mean([n.prefill_s for n in nodes]),
        aborted=cluster.aborted,
        sim_end_s=end,
        snapshots=cluster.snapshots,
        evictions=sum(n.cache.evictions for n in nodes),
        refused=sum(1 for j in cluster.jobs if j.rejected and j.arrival >= config.warmup_s),
    )
