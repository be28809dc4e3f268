"""A corrupt active pointer, through the admin API (issue 23, failure 6): before, Rollout (even
forced), Rollback, DisablePlan, GetStatus, ListPlans and GetPlan all answered INTERNAL and only
a hand edit of Redis helped. Now status and list show the damage, work that needs the pointer
answers FAILED_PRECONDITION naming the record, and rollout, rollback and disable overwrite it."""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores, schema
from dataplane.core.table_codec import table_to_proto
from tests.support.controlplane import Clients, clients, fast_config, running
from tests.support.factories import small_plan
from tests.support.records import corrupt_pointer
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc
RECORD = schema.pool_key("default", "active")


async def import_small(c: Clients, seed: int) -> str:
    table = table_to_proto(small_plan("default", seed=seed))
    summary = await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table, actor="ops"))
    return summary.metadata.version


async def refused(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() == code, raised.value.details()
    return raised.value.details() or ""


# The small imported plans name nodes no agent registered and carry no shadow verdict: the moves
# under test skip both gates by name (issue 24), as an operator repairing a pool would.
PAST_GATES = {"skip_gates": ["destinations", "shadow"], "reason": "repairing a corrupt pointer"}


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


@on_redis
async def test_a_corrupt_pointer_is_shown_and_each_move_repairs_it(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1, v2 = await import_small(c, 1), await import_small(c, 2)
        await c.plans.Rollout(admin_pb2.RolloutRequest(version=v1, actor="ops", **PAST_GATES))
        for repair in ("rollout", "rollback", "disable"):
            corrupt_pointer(state_url)
            status = await c.plans.GetStatus(admin_pb2.GetStatusRequest(pool="default"))
            (pool,) = [p for p in status.pools if p.pool == "default"]
            assert pool.active.action == "corrupt" and RECORD in pool.active.actor
            listed = await c.plans.ListPlans(admin_pb2.ListPlansRequest(pool="default"))
            assert listed.active.action == "corrupt" and not any(p.active for p in listed.plans)
            shown = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=v1))
            assert not shown.summary.active
            stale = admin_pb2.RolloutRequest(version=v2, expected_generation=99, **PAST_GATES)
            detail = await refused(c.plans.Rollout(stale), grpc.StatusCode.FAILED_PRECONDITION)
            assert RECORD in detail and "does not decode" in detail
            if repair == "rollout":
                moved = await c.plans.Rollout(
                    admin_pb2.RolloutRequest(version=v2, actor="ops", **PAST_GATES)
                )
            elif repair == "rollback":
                moved = await c.plans.Rollback(
                    admin_pb2.RollbackRequest(to_version=v1, **PAST_GATES)
                )
            else:
                moved = await c.plans.DisablePlan(admin_pb2.DisablePlanRequest(pool="default"))
            assert moved.action == repair
            status = await c.plans.GetStatus(admin_pb2.GetStatusRequest(pool="default"))
            (pool,) = [p for p in status.pools if p.pool == "default"]
            assert pool.active.action == repair and pool.active.generation == moved.generation
