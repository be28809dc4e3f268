"""PlanService's pointer moves over real gRPC: rollout, rollback, disable, under generations
(on the state twin; the concurrent-rollout race also on a real Redis)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from tests.support.controlplane import (
    SKIP_ALL,
    clients,
    fast_config,
    register_nodes,
    running,
)
from tests.support.plan_service import import_small, pass_shadow, refused
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


async def test_rollout_and_rollback_move_the_pointer_under_new_generations(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        v1, v2 = await import_small(c, 1), await import_small(c, 2)
        for version in (v1, v2):
            await pass_shadow(stores, version)  # every gate passes: nothing skipped
        first = await c.plans.Rollout(admin_pb2.RolloutRequest(version=v1, actor="alice"))
        assert (first.version, first.generation, first.action) == (v1, 1, "rollout")
        second = await c.plans.Rollout(
            admin_pb2.RolloutRequest(version=v2, expected_generation=1, actor="bob")
        )
        assert (second.version, second.generation) == (v2, 2)
        back = await c.plans.Rollback(admin_pb2.RollbackRequest(actor="carol", reason="bad"))
        assert (back.version, back.generation, back.action) == (v1, 3, "rollback")
        to = await c.plans.Rollback(admin_pb2.RollbackRequest(to_version=v2, actor="dave"))
        assert (to.version, to.generation) == (v2, 4)
        listed = await c.plans.ListPlans(admin_pb2.ListPlansRequest())
        assert listed.active.generation == 4
        assert [p.active for p in listed.plans] == [True, False]
        audit = await stores.plans.read_audit("default", 10)
        moves = [(e.action, e.actor, e.generation) for e in audit if e.generation]
        assert moves == [
            ("rollout", "unverified:alice", 1),
            ("rollout", "unverified:bob", 2),
            ("rollback", "unverified:carol", 3),
            ("rollback", "unverified:dave", 4),
        ]


@on_redis
async def test_two_concurrent_rollouts_exactly_one_wins(state_url: str, stores: Stores) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        v0, v1, v2 = [await import_small(c, s) for s in (0, 1, 2)]
        await c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version=v0, actor="setup"))
        calls = [
            c.plans.Rollout(
                admin_pb2.RolloutRequest(
                    **SKIP_ALL, version=v, expected_generation=1, actor=f"op-{v}"
                )
            )
            for v in (v1, v2)
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        winners = [r for r in results if isinstance(r, cluster_pb2.ActivePointer)]
        losers = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(winners) == 1 and len(losers) == 1
        assert losers[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        message = losers[0].details() or ""
        winner = winners[0]
        assert "generation 2" in message and winner.version in message
        assert f"op-{winner.version}" in message and "expected generation 1" in message
        active = await stores.plans.get_active("default")
        assert active is not None and (active.version, active.generation) == (winner.version, 2)


async def test_stale_expected_generation_is_failed_precondition(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        v1, v2 = await import_small(c, 1), await import_small(c, 2)
        await c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version=v1))
        await refused(
            c.plans.Rollout(
                admin_pb2.RolloutRequest(**SKIP_ALL, version=v2, expected_generation=0)
            ),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        await refused(
            c.plans.Rollback(admin_pb2.RollbackRequest(to_version=v2, expected_generation=7)),
            grpc.StatusCode.FAILED_PRECONDITION,
        )


async def test_rollout_of_a_missing_version_is_not_found_and_changes_nothing(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        v1 = await import_small(c, 1)
        await c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version=v1))
        message = await refused(
            c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version="p0123456789abcdef")),
            grpc.StatusCode.NOT_FOUND,
        )
        assert "p0123456789abcdef" in message
        await refused(
            c.plans.Rollout(
                admin_pb2.RolloutRequest(**SKIP_ALL, version="p0123456789abcdef", pool="other")
            ),
            grpc.StatusCode.NOT_FOUND,
        )
        active = await stores.plans.get_active("default")
        assert active is not None and (active.version, active.generation) == (v1, 1)


async def test_rollback_without_history_is_failed_precondition(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        message = await refused(
            c.plans.Rollback(admin_pb2.RollbackRequest()), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "no active plan" in message
        v1 = await import_small(c, 1)
        await c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version=v1))
        message = await refused(
            c.plans.Rollback(admin_pb2.RollbackRequest()), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "--to" in message


async def test_disable_is_a_generation_without_a_table_and_rollback_restores(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c)
        message = await refused(
            c.plans.DisablePlan(admin_pb2.DisablePlanRequest()),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "no active plan" in message
        v1 = await import_small(c, 1)
        await pass_shadow(stores, v1)
        await c.plans.Rollout(admin_pb2.RolloutRequest(version=v1, actor="alice"))
        off = await c.plans.DisablePlan(admin_pb2.DisablePlanRequest(actor="bob", reason="oops"))
        assert (off.version, off.generation, off.action, off.actor) == (
            "",
            2,
            "disable",
            "unverified:bob",
        )
        await refused(
            c.plans.DisablePlan(admin_pb2.DisablePlanRequest()),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        status = await c.plans.GetStatus(admin_pb2.GetStatusRequest())
        assert status.pools[0].active.version == ""
        assert not status.pools[0].HasField("active_destinations")
        back = await c.plans.Rollback(admin_pb2.RollbackRequest(actor="carol"))
        assert (back.version, back.generation) == (v1, 3)
        audit = await stores.plans.read_audit("default", 10)
        moves = [(e.action, e.actor, e.from_version, e.to_version) for e in audit if e.generation]
        assert moves == [
            ("rollout", "unverified:alice", "", v1),
            ("disable", "unverified:bob", v1, ""),
            ("rollback", "unverified:carol", "", v1),
        ]
        assert await stores.plans.previous_versions("default") == [v1]
