"""The shadow gate judging with a fitted fleet profile agrees with the simulator's own verdict on
the true fleet: a known-good plan (the paper workload) and a known-bad one (``lowshare``, where
affinity loses to Flat-LB, docs/results.md §4.1).

The fleet's engines are a known slowdown of the base profile. Its profile is fitted from its
Flat-LB telemetry (:func:`controlplane.lifecycle.fleet_profile.fit_profile`, state twin), the
gate's choice of profile is :func:`controlplane.lifecycle.shadow.judging_profile` (which must pick
the fitted one), and the replay is the gate's own (:func:`sim.shadow_replay.shadow`) on the full
requests. The routers' sampled trace is not what is replayed here: it keeps the first 64 prompt
blocks and no answer length, and on ``lowshare`` that truncation alone turns the verdict into a
pass (a limit of the sampled trace, stated in docs/components/controlplane.md)."""

from __future__ import annotations

import time

import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.fleet_profile import fit_profile
from controlplane.lifecycle.shadow import judging_profile
from sim.engine_model import QWEN_32B, EngineProfile
from sim.planning import make_stream, plan_for
from sim.shadow_replay import ShadowSettings, shadow
from sim.workloads.registry import make_workload
from tests.support.fleet import record_flat_windows, sampled

TRUTH = QWEN_32B.slowed(1.6, 40.0, name="truth", note="")
PAPER = make_workload("paper")
NODES = [f"n{i:02d}" for i in range(8)]


async def fitted_gate_profile(stores: Stores) -> EngineProfile:
    await stores.plans.add_pool("fleet")
    served = {qps: PAPER.requests(qps=qps, duration_s=60.0, seed=1) for qps in (4.0, 8.0, 12.0)}
    await record_flat_windows(stores, "fleet", TRUTH, 2, served)
    trace = PAPER.requests(qps=8.0, duration_s=60.0, seed=2)
    now_ms = int(time.time() * 1000)
    await stores.telemetry.add_samples(sampled("fleet", trace, now_ms - 60_000))
    request = admin_pb2.FitProfileRequest(pool="fleet", base=QWEN_32B.name)
    fitted = await fit_profile(stores, request, actor="alice", now_ms=now_ms, max_requests=2_000)
    assert fitted.factor == pytest.approx(1.6, rel=0.10)  # the fitting core's tolerance
    assert fitted.offset_ms == pytest.approx(40.0, abs=20.0)
    profile = await judging_profile(stores, "fleet", "")
    assert profile.name == fitted.name  # the gate picks the fitted profile, not the built-in
    return profile


def verdicts(workload: str, qps: float, duration_s: float, q_cap: float,
             fitted: EngineProfile) -> tuple[bool, bool]:  # fmt: skip
    """(the gate's verdict with the fitted profile, the simulator's on the true fleet)."""
    stream = make_stream(
        make_workload(workload), qps=qps, duration_s=duration_s, seed=1, prior_window_s=30.0
    )
    table = plan_for("lpt", stream, NODES, q_cap=q_cap)
    assert table is not None
    run = [
        shadow(stream.requests, table, ShadowSettings(profile=p, seeds=2, iterations=3,
                                                      max_requests=3_000)).passed
        for p in (fitted, TRUTH)
    ]  # fmt: skip
    return run[0], run[1]


@pytest.mark.slow
async def test_the_fitted_profile_agrees_with_the_true_fleet_on_a_good_and_a_bad_plan(
    memory_stores: Stores,
) -> None:
    fitted = await fitted_gate_profile(memory_stores)
    good = verdicts("paper", 30.0, 60.0, 7.5, fitted)
    bad = verdicts("lowshare", 6.0, 120.0, 1.0, fitted)
    assert good == (True, True), good
    assert bad == (False, False), bad
