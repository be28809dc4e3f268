"""A fleet profile fitted from what the pool itself reported, by the Flat-only rule.

docs/results.md §2 fits the paper's testbed on Flat-LB observations only: Flat-LB is cache-blind,
so its latencies say how fast the hardware is without saying anything about the policies to be
compared. The same rule, for a live pool: the observations are the pool's own TTFT quantiles
(the agents' histograms, merged over the pool) in windows where the pool was routed by Flat-LB
(no active plan), each at the request rate it served, and the stream is what it served (the
routers' sampled trace, rescaled to each window's rate). Two unknowns, as in §2 stage B: a
slowdown ``factor`` on every step-time coefficient of a base profile (:meth:`EngineProfile
.slowed`) and a constant TTFT ``offset`` (latency outside the engine: network, the server's own
overhead). For each factor of a geometric grid, refined around the best point, the Flat-LB runs
give predicted p50 and p99 per window; the offset that minimises the relative squared error is
closed-form (it is clamped at 0); the factor with the smallest error wins. Fit quality is the
root-mean-square relative error of the quantiles, stored with the profile so a gate can refuse
to judge on a poor fit.

Pure: the simulator only (no store, no clock). The control plane feeds it: the leader records
Flat-LB windows from the agents' histograms (:mod:`controlplane.cluster.fleet_windows`),
``cachectl profile fit`` fits and stores the profile (:mod:`controlplane.lifecycle.fleet_profile`)
and the shadow gate judges with it within the fit-quality bound
(:mod:`controlplane.lifecycle.fitted_profile`); docs/components/controlplane.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.cluster import ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.types import SimRequest

GRID = tuple(0.25 * 2 ** (i / 4) for i in range(17))  # 0.25 ... 4, four steps per doubling
REFINE_STEPS = 8


@dataclass(frozen=True)
class FleetWindow:
    """One Flat-LB window of the pool: the rate it served and the TTFT quantiles it reported."""

    qps: float
    ttft_p50_s: float
    ttft_p99_s: float


@dataclass(frozen=True)
class FleetFit:
    profile: EngineProfile
    factor: float
    offset_ms: float
    rms_relative_error: float  # of the fitted quantiles: the fit's quality
    windows: int


def _predict(
    streams: Sequence[Sequence[SimRequest]],
    profile: EngineProfile,
    nodes: int,
    warmup_s: float,
) -> list[tuple[float, float]]:
    out = []
    for stream in streams:
        run = simulate(
            stream, "flat", ClusterConfig(profile=profile, nodes=nodes, warmup_s=warmup_s)
        )
        out.append((run.ttft_p50_s, run.ttft_p99_s))
    return out


def _score(
    windows: Sequence[FleetWindow], predicted: Sequence[tuple[float, float]]
) -> tuple[float, float]:
    """(rms relative error, offset s) with the best offset >= 0 in closed form."""
    observed = [q for w in windows for q in (w.ttft_p50_s, w.ttft_p99_s)]
    model = [q for pair in predicted for q in pair]
    weights = [1.0 / (o * o) for o in observed]
    offset = sum((o - p) * wt for o, p, wt in zip(observed, model, weights, strict=True))
    offset = max(0.0, offset / sum(weights))
    errors = [(o - p - offset) / o for o, p in zip(observed, model, strict=True)]
    return math.sqrt(sum(e * e for e in errors) / len(errors)), offset


def fit_fleet(
    stream_at: Callable[[float], Sequence[SimRequest]],
    windows: Sequence[FleetWindow],
    base: EngineProfile,
    *,
    nodes: int,
    warmup_s: float = 0.0,
    name: str = "fitted",
) -> FleetFit:
    """Fit ``factor`` and ``offset`` on ``base`` to the windows (module docstring)."""
    if not windows or any(w.ttft_p50_s <= 0 or w.ttft_p99_s <= 0 or w.qps <= 0 for w in windows):
        raise ValueError("need at least one window with positive rate and TTFT quantiles")

    # One stream per window, replayed at every factor (drawing it again each time was a fifth of
    # the fit's CPU).
    streams = [stream_at(window.qps) for window in windows]

    def error(factor: float) -> tuple[float, float]:
        slowed = base.slowed(factor, 0.0, name=name, note="")
        return _score(windows, _predict(streams, slowed, nodes, warmup_s))

    scored = {f: error(f) for f in GRID}
    best = min(scored, key=lambda f: scored[f][0])
    i = GRID.index(best)
    low, high = GRID[max(0, i - 1)], GRID[min(len(GRID) - 1, i + 1)]
    for step in range(1, 2 * REFINE_STEPS):
        factor = low * (high / low) ** (step / (2 * REFINE_STEPS))
        scored[factor] = error(factor)
    best = min(scored, key=lambda f: scored[f][0])
    rms, offset = scored[best]
    profile = base.slowed(
        best, offset * 1000.0, name=name,
        note=f"{base.name} x {best:.3f} + {offset * 1000:.1f} ms TTFT, fitted on "
        f"{len(windows)} Flat-LB windows (rms relative error {rms:.1%}; sim/fleet_fit.py)",
    )  # fmt: skip
    return FleetFit(profile, best, offset * 1000.0, rms, len(windows))
