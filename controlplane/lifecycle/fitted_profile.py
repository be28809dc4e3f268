"""When the shadow gate judges with a pool's fitted fleet profile, and that profile as the
simulator's.

A fit is used only when its quality, the rms relative error of the fitted TTFT p50/p99 over the
windows, is at most :data:`MAX_RMS_RELATIVE_ERROR` (15%: the bound the fitting core's own tests
meet on a simulated fleet, tests/sim/test_fleet_fit.py). A poorer fit means the base profile's
shape does not describe these engines (a different model, a saturated window, a noisy pool):
scaling it would judge plans on a fleet that does not exist, so the built-in profile stays in
charge and ``cachectl profile show`` says so. Kept apart from the fit itself
(:mod:`controlplane.lifecycle.fleet_profile`) so the shadow replay can read it without the fit.
"""

from __future__ import annotations

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from sim.engine_model import EngineProfile, UnknownProfileError, get_profile

MAX_RMS_RELATIVE_ERROR = 0.15


def usable(profile: cluster_pb2.FleetProfile | None) -> bool:
    """Whether the shadow gate judges with this fitted profile (module docstring)."""
    return (
        profile is not None
        and profile.fitted_at_unix_ms > 0
        and profile.rms_relative_error <= MAX_RMS_RELATIVE_ERROR
    )


def engine_profile(profile: cluster_pb2.FleetProfile) -> EngineProfile:
    """The simulator's profile of a stored fit."""
    return get_profile(profile.base).slowed(
        profile.factor, profile.offset_ms, name=profile.name,
        note=f"{profile.base} x {profile.factor:.3f} + {profile.offset_ms:.1f} ms TTFT, fitted on "
        f"{profile.windows} Flat-LB windows of pool {profile.pool} "
        f"(rms relative error {profile.rms_relative_error:.1%})",
    )  # fmt: skip


async def gate_profile(stores: Stores, pool: str) -> EngineProfile | None:
    """The pool's fitted profile when the gate may use it, else None (the built-in one)."""
    fitted = await stores.telemetry.get_fleet_profile(pool)
    if fitted is None or not usable(fitted):
        return None
    try:
        return engine_profile(fitted)
    except UnknownProfileError:  # its base is no longer built in: judge on the default
        return None
