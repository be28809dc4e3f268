"""Checks and measurements of the engine model on one destination.

* :func:`nim_curve` replays NVIDIA NIM's published concurrency sweep for Llama-3.3-70B fp8 TP2
  (CALIBRATION.md §1): a closed loop of N clients, each sending a 5,000-token prompt with no
  reusable prefix and reading 500 output tokens, then sending the next at once. TTFT and ITL are
  means over the requests sent after every client's first two (the warm-up), ITL as
  (last token - first token) / (output - 1), as benchmark clients compute it.
* :func:`single_destination_knee` measures ``q_cap``, the per-destination load target of the
  planner: the highest arrival rate at which one destination fed the workload's whole request
  mix (so its cache is as warm as a planned destination's) keeps p99 TTFT within the SLO with at
  most 5% failures. Search: start at 0.5 req/s and double until a rate fails, then bisect between
  the last pass and the first failure ``iterations`` times. Each probe lasts ``duration_s`` or
  long enough for ``min_requests`` arrivals, whichever is longer (a p99 needs a few thousand
  samples), the first fifth of it warm-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cluster import ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.node import Job, Node
from sim.types import BLOCK_TOKENS, SimRequest, Workload

# (concurrency, TTFT ms, ITL ms) measured by NIM 1.8.0, 5,000 in / 500 out (CALIBRATION.md §1).
NIM_70B = ((1, 406.8, 18.58), (5, 546.7, 21.83), (25, 688.7, 38.75), (50, 834.5, 59.73),
           (100, 7996.0, 92.91))  # fmt: skip


@dataclass(frozen=True)
class CurvePoint:
    concurrency: int
    ttft_ms: float
    itl_ms: float
    ref_ttft_ms: float
    ref_itl_ms: float
    requests: int


def closed_loop(
    profile: EngineProfile,
    concurrency: int,
    *,
    prompt: int = 5000,
    output: int = 500,
    rounds: int = 8,
    warm_rounds: int = 2,
) -> tuple[float, float, int]:
    """Mean TTFT (ms), mean ITL (ms) and the number of requests measured."""
    node = Node(0, profile)
    blocks_per_prompt = -(-prompt // BLOCK_TOKENS)
    sent = [0]
    measured: list[Job] = []
    skip = warm_rounds * concurrency
    limit = rounds * concurrency

    def submit(now: float) -> None:
        rid = sent[0]
        sent[0] += 1
        first_block = rid * blocks_per_prompt + 1  # unique blocks: nothing is reused
        blocks = tuple(range(first_block, first_block + blocks_per_prompt))
        job = Job(rid, SimRequest(now, f"c{rid}", rid, blocks, prompt, output))
        if rid >= skip:
            measured.append(job)
        node.enqueue(job)

    def on_finish(job: Job, now: float) -> None:
        if sent[0] < limit:
            submit(now)

    node.on_finish = on_finish
    for _ in range(concurrency):
        submit(0.0)
    now = 0.0
    while any(job.finish < 0.0 for job in measured) or sent[0] < limit:
        dt = node.start_step(now)
        if dt <= 0.0:
            break
        now += dt
        node.end_step(now)
    ttft = [job.first_token - job.arrival for job in measured]
    itl = [(job.finish - job.first_token) / (output - 1) for job in measured]
    return 1000 * sum(ttft) / len(ttft), 1000 * sum(itl) / len(itl), len(measured)


def nim_curve(
    profile: EngineProfile, points: Sequence[tuple[int, float, float]] = NIM_70B
) -> list[CurvePoint]:
    """The model's closed-loop TTFT/ITL next to the reference measurements."""
    result = []
    for concurrency, ref_ttft, ref_itl in points:
        ttft, itl, count = closed_loop(profile, concurrency)
        result.append(CurvePoint(concurrency, ttft, itl, ref_ttft, ref_itl, count))
    return result


@dataclass(frozen=True)
class KneeProbe:
    qps: float
    p99_s: float
    failures: float
    kv_hit: float
    passed: bool


@dataclass(frozen=True)
class KneeResult:
    q_cap: float
    probes: tuple[KneeProbe, ...]


def _probe(
    workload: Workload,
    profile: EngineProfile,
    qps: float,
    *,
    slo_s: float,
    duration_s: float,
    seed: int,
) -> KneeProbe:
    requests: list[SimRequest] = workload.requests(qps=qps, duration_s=duration_s, seed=seed)
    config = ClusterConfig(
        profile=profile, nodes=1, warmup_s=duration_s / 5, abort_above_s=slo_s, seed=seed
    )
    metrics = simulate(requests, "flat", config)
    passed = not metrics.aborted and metrics.ttft_p99_s <= slo_s and metrics.failures <= 0.05
    return KneeProbe(qps, metrics.ttft_p99_s, metrics.failures, metrics.kv_hit, passed)


def single_destination_knee(
    workload: Workload,
    profile: EngineProfile,
    *,
    slo_s: float = 3.5,
    duration_s: float = 300.0,
    min_requests: int = 2000,
    seed: int = 0,
    iterations: int = 8,
    start_qps: float = 0.5,
) -> KneeResult:
    """q_cap: the highest per-destination rate meeting the SLO (see the module docstring)."""
    probes: list[KneeProbe] = []

    def probe(qps: float) -> bool:
        length = max(duration_s, min_requests / qps)
        result = _probe(workload, profile, qps, slo_s=slo_s, duration_s=length, seed=seed)
        probes.append(result)
        return result.passed

    low, high = 0.0, start_qps
    while probe(high):
        low, high = high, high * 2
        if high > 1e4:
            raise ValueError("no knee below 10,000 req/s: is the workload empty?")
    for _ in range(iterations):
        middle = (low + high) / 2
        if probe(middle):
            low = middle
        else:
            high = middle
    if low == 0.0:
        raise ValueError(f"one destination misses the {slo_s} s SLO even at {high:.3g} req/s")
    return KneeResult(low, tuple(probes))
