"""ShadowPlan end to end: the routers' sampled trace in a real Redis, a real control plane, the
replay, the verdict stored on the version and shown by list / get / status, and the audit."""

from __future__ import annotations

import time

import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.shadow import samples_to_requests
from dataplane.core.table_codec import table_to_proto
from sim.planning import make_stream, plan_for
from sim.workloads.registry import make_workload
from tests.support.controlplane import SKIP_ALL, clients, fast_config, running

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
        assert verdict.summary and verdict.decided_by == "bob" and verdict.report_json
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
        assert shadowed and shadowed[0].actor == "bob" and shadowed[0].to_version == version
