"""The leader's ``--plan-interval`` loop: periodic builds per pool, skips, and a real process.

A periodic build stores a plan and never activates it; a pool that cannot be planned (no nodes,
no traffic) is skipped without stopping the loop for the other pools.
"""

from __future__ import annotations

import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores, open_stores
from controlplane.server import ControlPlane
from tests.support.controlplane import ControlPlaneProcess, clients, quick_config, running, traffic
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


def runs(plane: ControlPlane, pool: str, outcome: str) -> float:
    value = plane.metrics.registry.get_sample_value(
        "cacheroute_controlplane_planner_runs_total",
        {"pool": pool, "trigger": "interval", "outcome": outcome},
    )
    return value or 0.0


async def add_traffic(stores: Stores, pool: str = "default") -> None:
    for window in range(3):
        counts = {"hot": 400, "warm": 100, **{f"cold-{i}": 2 for i in range(10)}}
        await stores.telemetry.add_traffic(traffic("r1", window, counts, total=1000, pool=pool))


async def test_the_plan_loop_stores_plans_per_pool_skips_the_unplannable_and_never_activates(
    redis_url: str, stores: Stores
) -> None:
    config = quick_config(redis_url, plan_interval_s=0.1, slots_per_node=2)
    async with running(config) as plane, clients(plane.address) as c:
        for i in range(3):
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id=f"n{i}", address=f"h:{i + 1}"))
        await stores.plans.add_pool("a-no-nodes")  # sorts first: its skip must not stop the loop
        await stores.plans.add_pool("no-traffic")
        await c.nodes.AddNode(
            admin_pb2.AddNodeRequest(pool="no-traffic", node_id="m0", address="h:9")
        )

        async def nothing_to_plan_yet() -> bool:
            return (
                runs(plane, "default", "skipped") >= 2 and runs(plane, "a-no-nodes", "skipped") >= 2
            )

        await eventually(nothing_to_plan_yet)  # no traffic anywhere yet: every pool is skipped
        assert await stores.plans.list_plans("default", 10) == []
        await add_traffic(stores)

        async def planned() -> bool:
            return bool(await stores.plans.list_plans("default", 10))

        await eventually(planned)
        meta = (await stores.plans.list_plans("default", 10))[0]
        assert (meta.created_by, meta.source, meta.note) == ("planner", "live", "periodic build")
        assert meta.stats.total_rate == pytest.approx(100, rel=1e-3)  # 1000 per 10 s window
        assert meta.stats.admitted_keys >= 2
        audit = await stores.plans.read_audit("default", 10)
        assert [(e.action, e.actor) for e in audit][-1] == ("build", "planner")
        assert await stores.plans.get_active("default") is None  # stored, never rolled out

        skipped = runs(plane, "a-no-nodes", "skipped")
        await eventually(lambda: _more(plane, "a-no-nodes", skipped))  # still going round
        assert runs(plane, "no-traffic", "skipped") > 0
        assert runs(plane, "default", "ok") >= 1
        assert await stores.plans.list_plans("a-no-nodes", 10) == []
        assert await stores.plans.list_plans("no-traffic", 10) == []


async def _more(plane: ControlPlane, pool: str, than: float) -> bool:
    return runs(plane, pool, "skipped") > than


async def test_without_plan_interval_no_plan_is_ever_built(redis_url: str, stores: Stores) -> None:
    async with running(quick_config(redis_url)) as plane, clients(plane.address) as c:
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n0", address="h:1"))
        await add_traffic(stores)

        async def rates_folded() -> bool:  # the rate loop ran: a planner would have had input
            return await stores.telemetry.load_rates("default") is not None

        await eventually(rates_folded)
        assert runs(plane, "default", "ok") == runs(plane, "default", "skipped") == 0
        assert await stores.plans.list_plans("default", 10) == []


@pytest.mark.slow
async def test_a_control_plane_process_with_plan_interval_builds_periodically(
    redis_url: str, processes: list[ControlPlaneProcess]
) -> None:
    plane = ControlPlaneProcess(
        "--redis-url", redis_url, "--plan-interval", "0.2", "--instance-id", "cp-plan"
    )
    processes.append(plane)
    plane.wait_for("became leader")
    stores = open_stores(redis_url)
    try:
        await stores.plans.add_pool("default")
        async with clients(plane.address) as c:
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n0", address="h:1"))
        await add_traffic(stores)
        stored = plane.wait_for("periodic plan stored", timeout=15)
        assert stored["pool"] == "default"
        metas = await stores.plans.list_plans("default", 10)
        assert stored["version"] in [m.version for m in metas]
        assert await stores.plans.get_active("default") is None
    finally:
        await stores.close()
    assert plane.terminate() == 0
