"""ShadowPlan end to end: the routers' sampled trace in a real Redis, a real control plane, the
replay, the verdict stored on the version and shown by list / get / status, and the audit."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.shadow import samples_to_requests
from dataplane.core.table_codec import table_to_proto
from servekit.status_details import unpack_details
from sim.planning import make_stream, plan_for
from sim.workloads.registry import make_workload
from tests.support.controlplane import SKIP_ALL, clients, fast_config, running
from tests.support.factories import small_plan

pytestmark = [pytest.mark.redis, pytest.mark.grpc]

ROUTER_BLOCKS = 64  # a router hashes at most the first 4,096 bytes: 64 blocks


def test_samples_become_requests_from_the_window_in_time_order() -> None:
    samples = [
        cluster_pb2.SampledRequest(at_unix_ms=t, key_hash=7, key="k", prefix_blocks=[1, 2, 3])
        for t in (5_000, 1_000, 3_000)
    ]
    requests = samples_to_requests(samples, since_ms=2_000)
    assert [r.arrival_s for r in requests] == [0.0, 2.0]
    assert requests[0].blocks == (1, 2, 3) and requests[0].prompt_tokens == 48


@pytest.mark.slow
async def test_shadow_replays_the_sampled_trace_and_records_the_verdict(
    redis_url: str, stores: Stores
) -> None:
    stream = make_stream(
        make_workload("paper"), qps=100.0, duration_s=40.0, seed=3, prior_window_s=30.0
    )
    nodes = [f"n{i:02d}" for i in range(30)]
    table = plan_for("lpt", stream, nodes, q_cap=12.094)
    assert table is not None
    now_ms = int(time.time() * 1000)
    start = now_ms - 60_000
    await stores.telemetry.add_samples(
        [
            cluster_pb2.SampledRequest(
                pool="sim",
                at_unix_ms=start + int(r.arrival_s * 1000),
                key_hash=r.key_hash,
                key=r.key,
                prefix_blocks=list(r.blocks[:ROUTER_BLOCKS]),
                router_id="r1",
            )
            for r in stream.requests
        ]
    )
    async with running(fast_config(redis_url)) as plane, clients(plane.address) as c:
        imported = await c.plans.ImportPlan(
            admin_pb2.ImportPlanRequest(table=table_to_proto(table), actor="alice")
        )
        version = imported.metadata.version
        verdict = await c.plans.ShadowPlan(
            admin_pb2.ShadowPlanRequest(pool="sim", version=version, recent_minutes=5, actor="bob"),
            timeout=600,
        )
        assert verdict.outcome in (
            table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS,
            table_pb2.ShadowVerdict.Outcome.OUTCOME_FAIL,
        )
        assert verdict.summary and verdict.decided_by == "unverified:bob" and verdict.report_json
        assert "sampled requests of the last 5 minutes" in verdict.source
        assert verdict.candidate["near_p99_s"] > 0 and verdict.baseline["capacity_qps"] > 0
        listed = await c.plans.ListPlans(admin_pb2.ListPlansRequest(pool="sim"))
        assert listed.plans[0].metadata.verdict.summary == verdict.summary
        await c.plans.Rollout(
            admin_pb2.RolloutRequest(**SKIP_ALL, pool="sim", version=version, actor="bob")
        )
        status = await c.plans.GetStatus(admin_pb2.GetStatusRequest(pool="sim"))
        pool = status.pools[0]
        assert pool.active_verdict.summary == verdict.summary
        assert pool.last_verdicts[0].version == version
        audit = await stores.plans.read_audit("sim", 10)
        shadowed = [e for e in audit if e.action == "shadow"]
        assert (
            shadowed and shadowed[0].actor == "unverified:bob" and shadowed[0].to_version == version
        )
        assert verdict.profile == "llama-3.3-70b-fp8-tp2-h100"  # which profile judged it
        assert verdict.samples == len(stream.requests)


async def test_a_small_pool_gets_an_inconclusive_verdict_that_the_gate_refuses(
    redis_url: str, stores: Stores
) -> None:
    stream = make_stream(
        make_workload("paper"), qps=2.0, duration_s=60.0, seed=3, prior_window_s=30.0
    )  # a small pool: 2 req/s for a minute, about 120 samples even at a sampling rate of 1
    table = small_plan("small", seed=1)  # destinations node-0..node-3
    start = int(time.time() * 1000) - 90_000
    await stores.telemetry.add_samples([
        cluster_pb2.SampledRequest(
            pool="small", at_unix_ms=start + int(r.arrival_s * 1000), key_hash=r.key_hash,
            key=r.key, prefix_blocks=list(r.blocks[:ROUTER_BLOCKS]),
        )
        for r in stream.requests
    ])  # fmt: skip
    assert 0 < len(stream.requests) < 300  # below the default --shadow-min-samples
    async with running(fast_config(redis_url)) as plane, clients(plane.address) as c:
        for i in range(4):
            await c.nodes.AddNode(
                admin_pb2.AddNodeRequest(pool="small", node_id=f"node-{i}", address=f"h:{i + 1}")
            )
        await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table_to_proto(table)))
        verdict = await c.plans.ShadowPlan(
            admin_pb2.ShadowPlanRequest(pool="small", version=table.version, actor="bob")
        )
        assert verdict.outcome == table_pb2.ShadowVerdict.Outcome.OUTCOME_INCONCLUSIVE
        assert verdict.samples == len(stream.requests)
        assert "--shadow-min-samples" in verdict.summary and "--sample-floor" in verdict.summary
        shadowed = [e for e in await stores.plans.read_audit("small", 10) if e.action == "shadow"]
        assert shadowed[-1].detail.startswith("inconclusive")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await c.plans.Rollout(admin_pb2.RolloutRequest(pool="small", version=table.version))
        refused = unpack_details(
            raised.value.trailing_metadata(),  # type: ignore[arg-type]
            admin_pb2.ActivationRefused,
        )
        assert refused is not None and [r.gate for r in refused.refusals] == ["shadow"]
        assert "inconclusive" in refused.refusals[0].message


async def test_no_samples_at_all_is_refused_naming_flags_that_exist(redis_url: str) -> None:
    async with running(fast_config(redis_url)) as plane, clients(plane.address) as c:
        table = table_to_proto(small_plan("empty", seed=1))
        await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await c.plans.ShadowPlan(
                admin_pb2.ShadowPlanRequest(pool="empty", version=table.version)
            )
        message = raised.value.details() or ""
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        for flag in ("--sample-rate", "--sample-floor", "--trace FILE"):
            assert flag in message
        assert "--trace-sample-rate" not in message
        router_flags = subprocess.run(
            [sys.executable, "-m", "dataplane", "--help"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "--sample-rate" in router_flags and "--sample-floor" in router_flags
