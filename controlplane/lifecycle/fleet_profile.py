"""FitProfile / GetProfile: an engine profile fitted to the pool's own Flat-LB telemetry.

The inputs are what the leader recorded (:mod:`controlplane.cluster.fleet_windows`: per Flat-LB
window the rate the engines served and the pool's TTFT p50/p99 from the agents' histograms) and
what the routers sampled (``cr:{pool}:trace``, the stream the shadow gate replays, read as
:func:`controlplane.lifecycle.shadow.samples_to_requests` reads it). :func:`sim.fleet_fit.fit_fleet`
fits a slowdown ``factor`` on the base profile's step times and a TTFT ``offset`` by the Flat-only
rule (docs/results.md §2), replaying the sampled stream at each window's rate (thinned evenly to
``max_requests``, as the gate thins it) under Flat-LB on as many nodes as reported in the windows.

The stored :class:`FleetProfile` carries its fit quality (rms relative error of the fitted
quantiles); when the shadow gate judges with it is :mod:`controlplane.lifecycle.fitted_profile`.
Because the sampled trace keeps only the first 64 prompt blocks of a request and no answer
length, the factor also absorbs that: it is the slowdown *as the gate will replay the pool*.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from controlplane.errors import InvalidArgumentError, PreconditionError
from controlplane.lifecycle.fitted_profile import MAX_RMS_RELATIVE_ERROR, usable
from controlplane.lifecycle.shadow import MAX_SAMPLES, samples_to_requests
from sim.engine_model import LLAMA_70B, UnknownProfileError, get_profile
from sim.fleet_fit import FleetWindow, fit_fleet
from sim.shadow_replay import scaled, thinned
from sim.types import SimRequest

MIN_WINDOWS = 3  # two unknowns: at least three (rate, p50, p99) points, at different rates
MIN_FIT_SAMPLES = 100
DEFAULT_MAX_REQUESTS = 3_000


def profile_name(pool: str, now_ms: int) -> str:
    stamp = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"fitted:{pool}@{stamp}"


def _stream(requests: Sequence[SimRequest], max_requests: int) -> tuple[list[SimRequest], float]:
    """The sampled stream thinned to ``max_requests``, from 0, and its own rate."""
    kept = thinned(sorted(requests, key=lambda r: r.arrival_s), max_requests)
    start = kept[0].arrival_s
    kept = [r.at(r.arrival_s - start) for r in kept]
    span = kept[-1].arrival_s
    return kept, (len(kept) / span if span > 0 else float(len(kept)))


async def fit_profile(
    stores: Stores,
    request: admin_pb2.FitProfileRequest,
    *,
    actor: str,
    now_ms: int,
    min_windows: int = MIN_WINDOWS,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> cluster_pb2.FleetProfile:
    """Fit, store and audit the pool's profile (module docstring)."""
    pool = request.pool or "default"
    try:
        base = get_profile(request.base or LLAMA_70B.name)
    except UnknownProfileError as exc:
        raise InvalidArgumentError(f"base: {exc}") from None
    stored = await stores.telemetry.read_fleet_windows(pool)
    if len(stored) < min_windows:
        raise PreconditionError(
            f"pool {pool} has {len(stored)} Flat-LB windows; a fit needs at least {min_windows} "
            "(the leader records one per minute of traffic while no plan is active: "
            "`cachectl plan disable` and wait)"
        )
    samples = await stores.telemetry.read_samples(pool, MAX_SAMPLES)
    requests = samples_to_requests(samples, 0)
    if len(requests) < MIN_FIT_SAMPLES:
        raise PreconditionError(
            f"pool {pool} has {len(requests)} sampled requests; a fit replays at least "
            f"{MIN_FIT_SAMPLES} (routers sample with --sample-rate, raised by --sample-floor)"
        )
    stream, own_qps = _stream(requests, max_requests)
    windows = [FleetWindow(w.qps, w.ttft_p50_s, w.ttft_p99_s) for w in stored]
    nodes = max([1, *(w.nodes for w in stored)])
    name = profile_name(pool, now_ms)
    try:
        fit = await asyncio.to_thread(
            fit_fleet, lambda qps: scaled(stream, qps / own_qps), windows, base,
            nodes=nodes, name=name,
        )  # fmt: skip
    except ValueError as exc:  # a window without latency: the store holds nonsense
        raise PreconditionError(f"cannot fit pool {pool}: {exc}") from None
    profile = cluster_pb2.FleetProfile(
        pool=pool, name=name, base=base.name, factor=fit.factor, offset_ms=fit.offset_ms,
        rms_relative_error=fit.rms_relative_error, windows=fit.windows,
        fitted_at_unix_ms=now_ms, fitted_by=actor, nodes=nodes, samples=len(stream),
    )  # fmt: skip
    await stores.telemetry.put_fleet_profile(profile)
    await stores.plans.append_audit(
        cluster_pb2.AuditEvent(
            at_unix_ms=now_ms, actor=actor, action="profile-fit", pool=pool,
            detail=f"{name}: {base.name} x {fit.factor:.3f} + {fit.offset_ms:.1f} ms on "
            f"{fit.windows} windows (rms relative error {fit.rms_relative_error:.1%}"
            f"{'' if usable(profile) else ', above the gate bound: not used'})",
        )
    )  # fmt: skip
    return profile


async def get_profile_status(
    stores: Stores, request: admin_pb2.GetProfileRequest
) -> admin_pb2.GetProfileResponse:
    pool = request.pool or "default"
    fitted = await stores.telemetry.get_fleet_profile(pool)
    return admin_pb2.GetProfileResponse(
        profile=fitted,
        windows=await stores.telemetry.read_fleet_windows(pool),
        used_by_gate=usable(fitted),
        max_rms_relative_error=MAX_RMS_RELATIVE_ERROR,
    )
