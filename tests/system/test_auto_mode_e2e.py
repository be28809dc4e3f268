"""Automatic mode end to end on the local cluster (real processes: Redis, control plane, a router,
agents, simulated engines): with automatic mode on, a plan that passes its shadow replay is
rolled out by the control plane itself; the engines slowed down right after that rollout
(``POST /admin/slowdown``) raise the pool's p99 TTFT, as the agents report it, and the live
guard disables the plan within its window, audited with the numbers (issue 11's acceptance)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from cachectl.loadgen.client import LoadClient
from cachectl.loadgen.runner import replay
from cachectl.loadgen.workloads import resolve
from cachectl.localcluster.cluster import LocalCluster
from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import open_stores
from controlplane.lifecycle.live_guard import AUTO_ACTOR, GUARD_ACTOR
from sim.engine_model import LLAMA_70B
from tests.support.timing import LagMeter, patiently

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.redis,
    pytest.mark.grpc,
    pytest.mark.timeout(400),  # a hang guard: a busy machine stretches the waits
]

Phase = cluster_pb2.GuardState.Phase
WINDOW_S = 6.0
SETTLE_S = 5.0  # time for the test to slow the engines before the guard's after-window opens
CONTROLPLANE_ARGS = (
    "--auto-interval", "2",
    "--rate-update-interval", "0.5",
    "--shadow-max-requests", "1500",
    "--shadow-seeds", "2",
    "--shadow-iterations", "1",
    "--shadow-recent-minutes", "1",
    "--shadow-profile", LLAMA_70B.name,
    "--guard-window", str(WINDOW_S),
    "--guard-settle", str(SETTLE_S),
    "--guard-min-samples", "20",
    "--guard-max-regression", "0.5",
    "--guard-floor", "0.1",
)  # fmt: skip


async def until(what: str, deadline: float, probe: object) -> object:
    """Poll ``probe()`` (a coroutine function) until it returns something truthy."""
    while True:
        found = await probe()  # type: ignore[operator]
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.25)


async def test_automatic_mode_rolls_out_a_passing_plan_and_the_guard_catches_a_slow_engine(
    tmp_path: Path, lag: LagMeter
) -> None:
    spec = ClusterSpec(
        engines=4,
        routers=1,
        profile=LLAMA_70B.name,
        controlplane_args=CONTROLPLANE_ARGS,
        router_args=("--sample-rate", "1.0"),
    )
    workload = resolve("tenants", {"top_k": 16, "context_tokens": 1024})
    requests = workload.requests(qps=30, duration_s=50.0, seed=1)
    cluster = LocalCluster(spec, tmp_path / "logs")
    try:
        cluster.start()
        await patiently(cluster.wait_ready, 60, gives_up=ClusterError)
        # route_blocks: the routers see (and sample) each prompt's prefix blocks, which the
        # shadow replay needs; without them every sampled prompt looks unique and tiny.
        loadgen = LoadClient(cluster.router_addresses, route_blocks=True)
        async with loadgen as client, aiohttp.ClientSession() as http:
            load = asyncio.create_task(replay(client, requests, drain_timeout_s=20))
            await asyncio.sleep(8.0)  # traffic reports, sampled requests, TTFT history
            enabled = await cluster._admin(
                "plans", "SetAutoMode",
                admin_pb2.SetAutoModeRequest(pool="default", enabled=True, actor="alice"),
            )  # fmt: skip
            assert enabled.enabled and enabled.actor == "unverified:alice"

            async def rolled_out() -> cluster_pb2.ActivePointer | None:
                pool = await cluster.status()
                active = pool.active if pool is not None else None
                return active if active is not None and active.actor == AUTO_ACTOR else None

            pointer = await until("an automatic rollout", time.monotonic() + 30, rolled_out)
            assert isinstance(pointer, cluster_pb2.ActivePointer) and pointer.version
            rolled_at = time.monotonic()
            # Every engine slowed 20x: the routers' load-aware choices route around one slow
            # engine (the plan's keys have other replicas, the tail goes by least load), so a
            # single one barely moves the pool's p99; a fleet-wide slow-down cannot be avoided.
            for address in cluster.engine_addresses.values():
                url = f"http://{address}/admin/slowdown"
                async with http.post(url, json={"factor": 20.0}) as response:
                    assert response.status == 200
            slowed_ms = time.time() * 1000
            late_s = (slowed_ms - pointer.updated_at_unix_ms) / 1000
            if late_s >= SETTLE_S:  # a precondition: the after-window must see the slow fleet
                pytest.skip(
                    f"the engines were slowed {late_s:.1f} s after the rollout, past the guard's "
                    f"{SETTLE_S} s settle: the after-window cannot judge them ({lag.describe()})"
                )

            async def fired() -> admin_pb2.PoolStatus | None:
                pool = await cluster.status()
                done = pool is not None and pool.guard.phase not in (
                    Phase.PHASE_IDLE, Phase.PHASE_WATCHING,
                )  # fmt: skip
                return pool if done else None

            pool = await until("the guard's decision", time.monotonic() + 45, fired)
            decided_after_s = time.monotonic() - rolled_at
            load.cancel()
        assert cluster.redis is not None
        stores = open_stores(cluster.redis.url)
        try:
            audit = await stores.plans.read_audit("default", 100)
        finally:
            await stores.close()
    finally:
        cluster.stop()
    assert isinstance(pool, admin_pb2.PoolStatus)
    guard = pool.guard
    print(f"\nguard: {guard.detail} ({decided_after_s:.1f} s after the rollout)")
    assert guard.phase == Phase.PHASE_FIRED, guard.detail
    assert guard.version == pointer.version and guard.action == "disable"
    assert guard.after_p99_s > guard.before_p99_s * 1.5
    # settle + window (+ up to two more windows while a stalled fleet's first tokens arrive),
    # plus the guard's tick and polling under load
    lag.claim(
        decided_after_s <= SETTLE_S + 3 * WINDOW_S + 10,
        f"the guard decided {decided_after_s:.1f} s after the rollout",
    )
    assert not pool.active.version and pool.active.actor == GUARD_ACTOR  # Flat-LB now
    assert not pool.auto_mode.enabled and pool.auto_mode.actor == GUARD_ACTOR
    verdicts = {v.version: v.verdict for v in pool.last_verdicts}
    assert verdicts[pointer.version].outcome == table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS
    actions = [(e.action, e.actor) for e in audit]
    assert ("auto_enable", "unverified:alice") in actions
    assert ("rollout", AUTO_ACTOR) in actions and ("shadow", AUTO_ACTOR) in actions
    fired_event = next(e for e in audit if e.action == "disable")
    assert fired_event.actor == GUARD_ACTOR and fired_event.from_version == pointer.version
    assert "regressed: p99 TTFT" in fired_event.detail and "before ->" in fired_event.detail
