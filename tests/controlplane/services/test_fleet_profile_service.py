"""FitProfile / GetProfile over RPC on the state twin: a simulated fleet with a known slowdown of
the base profile, observed under Flat-LB, is fitted back within the fitting core's stated
tolerance (tests/sim/test_fleet_fit.py: 10% on the factor, 20 ms on the offset); too few windows
is FAILED_PRECONDITION naming how many exist and are needed; a shadow replay naming no profile
is judged by the fitted one and its verdict says so."""

from __future__ import annotations

import time

import grpc
import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.fitted_profile import MAX_RMS_RELATIVE_ERROR
from dataplane.core.table_codec import table_to_proto
from sim.engine_model import LLAMA_70B, QWEN_32B
from sim.workloads.registry import make_workload
from tests.support.controlplane import clients, quick_config, running
from tests.support.factories import small_plan
from tests.support.fleet import record_flat_windows, sampled

pytestmark = [pytest.mark.grpc]
WORKLOAD = make_workload("paper")
NODES = 2


@pytest.mark.slow
async def test_profile_fit_recovers_a_simulated_fleets_slowdown_over_rpc(
    memory_url: str, memory_stores: Stores
) -> None:
    stores = memory_stores
    await stores.plans.add_pool("fleet")
    truth = LLAMA_70B.slowed(1.6, 40.0, name="truth", note="")
    served = {qps: WORKLOAD.requests(qps=qps, duration_s=60.0, seed=1) for qps in (4.0, 8.0, 12.0)}
    await record_flat_windows(stores, "fleet", truth, NODES, served)
    now_ms = int(time.time() * 1000)  # the routers' sample of another draw of the traffic
    trace = WORKLOAD.requests(qps=8.0, duration_s=60.0, seed=2)
    await stores.telemetry.add_samples(sampled("fleet", trace, now_ms - 60_000))
    table = small_plan("fleet", seed=1)
    # Every replay is inconclusive (more samples needed than exist): it records the profile that
    # would have judged it without running the replay.
    config = quick_config(memory_url, shadow_max_requests=2_000, shadow_min_samples=100_000)
    async with running(config) as plane, clients(plane.address) as c:
        shown = await c.plans.GetProfile(admin_pb2.GetProfileRequest(pool="fleet"))
        assert not shown.HasField("profile") and len(shown.windows) == 3
        await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table_to_proto(table)))
        shadow = admin_pb2.ShadowPlanRequest(pool="fleet", version=table.version)
        before = await c.plans.ShadowPlan(shadow)
        fitted = await c.plans.FitProfile(
            admin_pb2.FitProfileRequest(pool="fleet", actor="alice")  # base: the 70B default
        )
        shown = await c.plans.GetProfile(admin_pb2.GetProfileRequest(pool="fleet"))
        after = await c.plans.ShadowPlan(shadow)
        shadow.profile = QWEN_32B.name  # a named profile wins over the fitted one
        named = await c.plans.ShadowPlan(shadow)
    assert before.profile == LLAMA_70B.name and after.profile == fitted.name
    assert named.profile == QWEN_32B.name
    assert fitted.factor == pytest.approx(1.6, rel=0.10)
    assert fitted.offset_ms == pytest.approx(40.0, abs=20.0)
    assert fitted.rms_relative_error <= MAX_RMS_RELATIVE_ERROR
    assert fitted.windows == 3 and fitted.nodes == NODES and fitted.base == LLAMA_70B.name
    assert fitted.name.startswith("fitted:fleet@") and fitted.fitted_by == "unverified:alice"
    assert shown.profile == fitted and shown.used_by_gate
    (event,) = [e for e in await stores.plans.read_audit("fleet", 10) if e.action == "profile-fit"]
    assert event.actor == "unverified:alice" and fitted.name in event.detail


async def test_too_few_windows_is_a_precondition_naming_held_and_needed(
    memory_url: str, memory_stores: Stores
) -> None:
    await memory_stores.plans.add_pool("new")
    truth = LLAMA_70B.slowed(1.2, 0.0, name="truth", note="")
    served = {10.0: WORKLOAD.requests(qps=10.0, duration_s=5.0, seed=1)}
    await record_flat_windows(memory_stores, "new", truth, NODES, served)
    async with running(quick_config(memory_url)) as plane, clients(plane.address) as c:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.plans.FitProfile(admin_pb2.FitProfileRequest(pool="new"))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "has 1 Flat-LB windows; a fit needs at least 3" in str(refused.value.details())
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await c.plans.FitProfile(admin_pb2.FitProfileRequest(pool="new", base="gpt-9"))
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        shown = await c.plans.GetProfile(admin_pb2.GetProfileRequest(pool="new"))
    assert not shown.used_by_gate and len(shown.windows) == 1
