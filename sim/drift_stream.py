"""The drift experiment's settings and its drifting request stream (:mod:`sim.drift`'s model).

Apart from the experiment (plans per arm, the simulation, the read-outs) because the stream is
the model to check on its own: it must follow the drifted weights interval by interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from controlplane.core.replanner import DEFAULT_MAX_CHURN, DEFAULT_TOLERANCE
from sim.engine_model import EngineProfile
from sim.types import SimRequest
from sim.workloads.blocks import mix
from sim.workloads.lowshare import SHAPE as LOWSHARE_SHAPE
from sim.workloads.lowshare import LowShareWorkload
from sim.workloads.paper import PaperWorkload, generate
from sim.workloads.popularity import Population
from sim.workloads.single_turn import single_turn_requests

F64 = npt.NDArray[np.float64]
SIGMA = 0.3
STEPS = 6


Generator = Callable[[Population, float, float, int], list[SimRequest]]


class DriftError(ValueError):
    """A drift experiment that cannot be run as asked (unknown workload, bad setting)."""


def _paper(pop: Population, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
    return generate(pop, PaperWorkload().arrivals(), qps, duration_s, seed).requests()


def _lowshare(pop: Population, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
    arrivals = LowShareWorkload().arrivals()
    return single_turn_requests(
        LOWSHARE_SHAPE, pop, arrivals, qps=qps, duration_s=duration_s, seed=seed
    )


GENERATORS: dict[str, Generator] = {"paper": _paper, "lowshare": _lowshare}


@dataclass(frozen=True)
class DriftSettings:
    profile: EngineProfile
    q_cap: float
    qps: float
    nodes: int = 30
    top_k: int = 128
    interval_s: float = 120.0
    plan_window_s: float = 60.0
    dip_window_s: float = 30.0
    slots_per_node: int = 8
    tolerance: float = DEFAULT_TOLERANCE
    max_churn: float | None = DEFAULT_MAX_CHURN
    sigma: float = SIGMA
    steps: int = STEPS
    seed: int = 1

    def check(self) -> None:
        for name in ("q_cap", "qps", "interval_s", "plan_window_s", "dip_window_s"):
            if not getattr(self, name) > 0:
                raise DriftError(f"{name} must be > 0, got {getattr(self, name)}")
        if 2 * self.dip_window_s > self.interval_s:
            raise DriftError("2 x dip_window_s must fit in interval_s")
        if self.steps < 1 or self.nodes < 1 or self.sigma < 0:
            raise DriftError("steps and nodes must be >= 1 and sigma >= 0")


def drift_weights(base: F64, sigma: float, steps: int, rng: np.random.Generator) -> F64:
    """(steps + 1) × keys: row 0 is ``base``, each next row one lognormal step, renormalised."""
    rows = [base / base.sum()]
    for _ in range(steps):
        w = rows[-1] * np.exp(sigma * rng.standard_normal(base.shape[0]))
        rows.append(w / w.sum())
    return np.stack(rows)


def drifting_stream(
    generator: Generator, active: Population, weights: F64, s: DriftSettings
) -> list[SimRequest]:
    """Requests from -plan_window_s to (steps + 1) · interval_s (times from the first interval's
    start, shifted so the list starts at 0 + plan_window_s), thinned to follow ``weights``."""
    peak = weights.max(axis=0)
    scale = float(peak.sum())
    pop = Population(active.names, active.hashes, peak / scale)
    horizon = s.plan_window_s + (s.steps + 1) * s.interval_s
    raw = generator(pop, s.qps * scale, horizon, s.seed)
    index = {h: i for i, h in enumerate(active.hashes)}
    keys = np.array([index[r.key_hash] for r in raw], dtype=np.int64)
    times = np.array([r.arrival_s for r in raw], dtype=np.float64) - s.plan_window_s
    interval = np.clip(np.floor(times / s.interval_s), 0, s.steps).astype(np.int64)
    threads = np.array([r.thread for r in raw], dtype=np.int64)
    salt = np.uint64(s.seed * 2 + 1)
    ident = np.where(threads >= 0, threads, -1 - np.arange(len(raw))).astype(np.uint64)
    u = (mix(salt, ident) >> np.uint64(11)).astype(np.float64) / 2.0**53
    keep = u < weights[interval, keys] / peak[keys]
    return [r for r, k in zip(raw, keep.tolist(), strict=True) if k]
