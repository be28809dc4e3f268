"""The paper-testbed calibration: unknowns fitted on the paper's Flat-LB observations ONLY.

Flat-LB is cache-blind, so its observations say how much reuse the workload offers and how
slow the testbed is without saying anything about the policies being compared. Nothing else
(no other policy's result) enters the fit. Two stages:

**A. Workload** (cache only, no engine). Unknowns: the retrieved block's scope, the per-key
document pool, the template size and the answer length (median); the retrieved block's mean
size is then the remainder of Table 6's 1.2K-token mean prompt, so Table 6's prompt rows hold by
construction and the 67% break follows from ``rag_same`` (measured on the stream, not assumed).
Observations (served KV hit of Flat-LB, 30 TP2 destinations):

* 70B fp8, 40,071 blocks, top-K128: 64.1 ± 1.3%
* 70B fp16, top-K128: 19.5 ± 2.1%; top-K256: ≈ 10% (no interval given: ± 2 points assumed)

The fp16 block count follows from the fp8 configuration: fp8 KV (160 KiB/token) of 40,071 blocks
is 105.1 GB over the pair, beside 70.6 GB of fp8 weights, so the pair gives weights + KV
175.7 GB; fp16 weights take 141.2 GB, leaving 34.5 GB of KV at 320 KiB/token = 105,111 tokens
= 6,569 blocks.

Flat-LB's hit is computed on one destination: a cache-blind balancer sends each request to a
destination independently of its content, so one destination sees an independent 1/30 thinning
of the whole stream (conversations split across destinations, as they are under Flat-LB). Its
LRU cache is fed that thinned stream after a warm-up; the hit is the token-weighted mean over
the measured part.

**B. Engine** (full simulations of Flat-LB on 30 destinations with the stage-A workload). Two
unknowns: a slowdown factor on every step-time coefficient of the public 70B profile, and a
constant TTFT offset (a harness latency the paper does not describe). Observations: per-seed
capacity at p99 TTFT ≤ 3.5 s {30, 30, 30, 60, 60} on the ladder 30…300 (seeds 2-6), capacity at
≤ 5 s 80 QPS, p99 TTFT at 100 QPS 5.7 s. A constant offset shifts every TTFT by the same amount,
so for each factor one set of runs gives the p99s and every offset is scored on them exactly
(``p99 + offset``); the feasible set is every (factor, offset) meeting all three observations.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sim.capacity import Rung, knee
from sim.engine_model import LLAMA_70B, PAPER_TESTBED_FILE, EngineProfile
from sim.steady import LruBlocks
from sim.study import RunSettings, run_task
from sim.types import BLOCK_TOKENS
from sim.workloads.paper import PaperWorkload
from sim.workloads.paper_shape import CONTEXT_TOKENS

NODES = 30
FROZEN_FILE = PAPER_TESTBED_FILE
KV_FP8 = 40_071
_KIB = 1024
_WEIGHTS_FP8_B = 70.6e9
KV_FP16 = int(
    (KV_FP8 * BLOCK_TOKENS * 160 * _KIB + _WEIGHTS_FP8_B - 2 * _WEIGHTS_FP8_B)
    / (320 * _KIB)
    / BLOCK_TOKENS
)
PROMPT_MEAN = 1200.0

# (label, top_k, kv_blocks, observed hit, sigma)
HIT_OBSERVATIONS = (
    ("fp8_k128", 128, KV_FP8, 0.641, 0.013),
    ("fp16_k128", 128, KV_FP16, 0.195, 0.021),
    ("fp16_k256", 256, KV_FP16, 0.10, 0.02),
)
PAPER_LADDER = (30.0, 60.0, 80.0, 100.0, 120.0, 140.0, 160.0, 180.0, 220.0, 300.0)
CAP35_PER_SEED = (30.0, 30.0, 30.0, 60.0, 60.0)
CAP5_MEAN = 80.0
P99_AT_100 = 5.7
SEEDS = (2, 3, 4, 5, 6)


@dataclass(frozen=True)
class WorkloadPoint:
    rag_scope: str
    rag_docs: int
    template_tokens: int
    answer_median: float
    rag_tokens: int = 0  # derived from the 1.2K budget when 0

    def options(self) -> dict[str, Any]:
        return {
            "rag_scope": self.rag_scope,
            "rag_docs": self.rag_docs,
            "template_tokens": self.template_tokens,
            "answer_median": self.answer_median,
            "rag_tokens": self.rag_tokens,
        }


def with_budget(point: WorkloadPoint, seed: int = 1) -> WorkloadPoint | None:
    """The point with ``rag_tokens`` set so the mean prompt is 1.2K (None: no room left)."""
    probe = PaperWorkload(**(point.options() | {"rag_tokens": 218}))
    stream = probe.stream(qps=100.0, duration_s=120.0, seed=seed)
    rest = float(stream.history_tokens.mean() + stream.current_tokens.mean())
    rag = round(PROMPT_MEAN - CONTEXT_TOKENS - point.template_tokens - rest)
    return replace(point, rag_tokens=int(rag)) if rag >= 32 else None


def flat_hit_one_node(
    workload: PaperWorkload,
    kv_blocks: int,
    *,
    qps: float = 100.0,
    horizon_s: float = 1200.0,
    warm_s: float = 500.0,
    seed: int = 1,
) -> float:
    """Flat-LB's served hit on one of 30 destinations (module docstring)."""
    stream = workload.stream(qps=qps, duration_s=horizon_s, seed=seed)
    keep = np.flatnonzero(
        np.random.default_rng(seed).integers(0, NODES, len(stream.arrival_s)) == 0
    )
    blocks = _pick(stream.block_ids, stream.block_start, keep)
    assert stream.output_ids is not None and stream.output_start is not None
    outputs = _pick(stream.output_ids, stream.output_start, keep)
    cache = LruBlocks(kv_blocks)
    cached = prompt = 0
    arrivals = stream.arrival_s[keep].tolist()
    tokens = stream.prompt_tokens[keep].tolist()
    for t, b, o, p in zip(arrivals, blocks, outputs, tokens, strict=True):
        hit = cache.serve(b, o)
        if t >= warm_s:
            cached += min(hit * BLOCK_TOKENS, p - 1)
            prompt += p
    return cached / prompt if prompt else 0.0


def _pick(ids: np.ndarray, start: np.ndarray, keep: np.ndarray) -> list[tuple[int, ...]]:
    """The block tuples of requests ``keep`` only (building all of them is the slow part)."""
    flat = ids.tolist()
    lo, hi = start[keep].tolist(), start[keep + 1].tolist()
    return [tuple(flat[a:b]) for a, b in zip(lo, hi, strict=True)]


@dataclass(frozen=True)
class WorkloadFit:
    point: WorkloadPoint
    hits: dict[str, float]
    z: dict[str, float]

    @property
    def chi2(self) -> float:
        return math.fsum(v * v for v in self.z.values())

    @property
    def fits(self) -> bool:
        """Every observation within 2 sigma."""
        return all(abs(v) <= 2.0 for v in self.z.values())


def score_workload(point: WorkloadPoint, *, horizon_s: float = 1200.0) -> WorkloadFit:
    hits: dict[str, float] = {}
    z: dict[str, float] = {}
    for label, top_k, kv, observed, sigma in HIT_OBSERVATIONS:
        workload = PaperWorkload(top_k=top_k, **point.options())
        hits[label] = flat_hit_one_node(workload, kv, horizon_s=horizon_s)
        z[label] = (hits[label] - observed) / sigma
    return WorkloadFit(point, hits, z)


def workload_grid(
    scopes: Iterable[str], docs: Iterable[int], templates: Iterable[int], answers: Iterable[float]
) -> list[WorkloadPoint]:
    points = []
    for scope, d, t, a in itertools.product(scopes, docs, templates, answers):
        point = with_budget(WorkloadPoint(scope, d, t, a))
        if point is not None:
            points.append(point)
    return points


def fit_workload(
    points: Sequence[WorkloadPoint], *, horizon_s: float = 1200.0
) -> list[WorkloadFit]:
    """Every point scored, best (lowest chi²) first."""
    return sorted((score_workload(p, horizon_s=horizon_s) for p in points), key=lambda f: f.chi2)


# -- stage B ----------------------------------------------------------------------------------


STAGE_B_LADDER = (30.0, 60.0, 80.0, 100.0)  # every knee Flat-LB showed is <= 100


def flat_p99(
    options: dict[str, Any],
    factor: float,
    seed: int,
    qps: float,
    *,
    duration_s: float = 150.0,
    warmup_s: float = 30.0,
) -> tuple[float, float, bool]:
    """(p99 TTFT without offset, failures, aborted) of Flat-LB, steady state, at ``factor``."""
    settings = RunSettings(
        profile=slowed(factor, 0.0), q_cap=1.0, nodes=NODES, duration_s=duration_s,
        warmup_s=warmup_s, prewarm_s=None, abort_above_s=12.0,
    )  # fmt: skip
    workload = PaperWorkload(top_k=128, **options)
    m = run_task(workload, ["flat"], settings, qps=qps, seed=seed)[0].metrics
    return m.ttft_p99_s, m.failures, m.aborted


def slowed(factor: float, offset_ms: float) -> EngineProfile:
    return LLAMA_70B.slowed(factor, offset_ms, name="paper-testbed", note="calibration trial")


@dataclass(frozen=True)
class EngineScore:
    factor: float
    offset_s: float
    cap35: tuple[float, ...]
    cap5_mean: float
    p99_100: float

    @property
    def fits(self) -> bool:
        """Per-seed 3.5 s knees as observed (as a multiset), 5 s mean within one rung's half-gap
        (80 ± 10 QPS), p99 at 100 QPS within ± 0.5 s of 5.7 s."""
        return (
            self._knees_match()
            and abs(self.cap5_mean - CAP5_MEAN) <= 10.0
            and abs(self.p99_100 - P99_AT_100) <= 0.5
        )

    def _knees_match(self) -> bool:
        """The observed per-seed knees as a multiset (a smaller budget: each in {30, 60})."""
        if len(self.cap35) == len(CAP35_PER_SEED):
            return sorted(self.cap35) == sorted(CAP35_PER_SEED)
        return all(k in set(CAP35_PER_SEED) for k in self.cap35)

    @property
    def distance(self) -> float:
        if len(self.cap35) == len(CAP35_PER_SEED):
            pairs = zip(sorted(self.cap35), sorted(CAP35_PER_SEED), strict=True)
            knees = sum(abs(a - b) for a, b in pairs) / len(CAP35_PER_SEED)
        else:
            knees = abs(float(np.mean(self.cap35)) - float(np.mean(CAP35_PER_SEED)))
        return knees / 30 + abs(self.cap5_mean - CAP5_MEAN) / 20 + abs(self.p99_100 - P99_AT_100)


def score_offsets(
    factor: float,
    p99s: dict[tuple[int, float], tuple[float, float, bool]],
    offsets: Iterable[float],
) -> list[EngineScore]:
    """Every offset scored on one factor's runs (TTFT + offset shifts each p99 exactly)."""
    seeds = sorted({s for s, _ in p99s})
    ladder = sorted({q for _, q in p99s})
    scores = []
    for offset in offsets:
        cap35: list[float] = []
        cap5: list[float] = []
        for seed in seeds:
            rungs = [
                Rung(q, p99s[(seed, q)][0] + offset, p99s[(seed, q)][1], p99s[(seed, q)][2])
                for q in ladder
            ]
            cap35.append(knee(rungs, 3.5).capacity)
            cap5.append(knee(rungs, 5.0).capacity)
        at100 = [p99s[(s, 100.0)][0] + offset for s in seeds if (s, 100.0) in p99s]
        scores.append(
            EngineScore(
                factor,
                round(offset, 4),
                tuple(cap35),
                float(np.mean(cap5)),
                float(np.mean(at100)) if at100 else float("nan"),
            )
        )
    return scores


def offset_grid(step: float = 0.05, top: float = 6.0) -> list[float]:
    return [round(i * step, 4) for i in range(int(top / step) + 1)]
