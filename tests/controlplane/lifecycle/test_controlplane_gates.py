"""PlanService's activation gates over real gRPC: shadow verdicts and registered destinations
refuse a pointer move with typed details, and a named skip lets it through, audited."""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from dataplane.core.table_codec import table_to_proto
from servekit.status_details import unpack_details
from tests.support.controlplane import (
    Clients,
    clients,
    fast_config,
    register_nodes,
    running,
)
from tests.support.factories import small_plan
from tests.support.plan_service import import_small, pass_shadow, refused

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


async def test_rollout_of_a_plan_for_unknown_nodes_is_refused_naming_them(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        for node in ("gpu-0", "gpu-1"):
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id=node, address="h:1"))
        table = table_to_proto(small_plan(seed=1))  # destinations node-0..node-3
        imported = await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table, actor="a"))
        check = imported.destinations
        assert (check.destinations, check.registered, check.eligible) == (4, 0, 0)
        assert set(check.missing_warm) <= set(check.missing) == {f"node-{i}" for i in range(4)}
        version = imported.metadata.version
        message = await refused(
            c.plans.Rollout(admin_pb2.RolloutRequest(version=version, actor="alice")),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "not registered nodes of pool default" in message
        assert "--skip-gate destinations" in message
        assert all(f"node-{i}" in message for i in range(4))
        assert await stores.plans.get_active("default") is None  # nothing changed
        await pass_shadow(stores, version)
        skipped = await c.plans.Rollout(
            admin_pb2.RolloutRequest(
                version=version, actor="alice", reason="drill", skip_gates=["destinations"]
            )
        )
        assert skipped.generation == 1
        (event,) = [e for e in await stores.plans.read_audit("default", 10) if e.generation]
        assert (event.action, event.actor) == ("rollout", "unverified:alice")
        assert event.detail.startswith("drill; skipped gate destinations (would refuse:")
        assert "node-0" in event.detail


def refusal_of(error: grpc.aio.AioRpcError) -> admin_pb2.ActivationRefused:
    """The typed details of a refused pointer move (never its message text)."""
    found = unpack_details(error.trailing_metadata(), admin_pb2.ActivationRefused)  # type: ignore[arg-type]
    assert found is not None, error.details()
    return found


async def refused_by(call: object) -> admin_pb2.ActivationRefused:
    """Await a pointer move that gates must refuse; returns the typed refusal."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION, raised.value.details()
    return refusal_of(raised.value)


async def two_generations(c: Clients, stores: Stores) -> tuple[str, str]:
    """v1 then v2 rolled out through every gate (nodes node-0..3 registered, verdicts pass)."""
    await register_nodes(c)
    v1, v2 = await import_small(c, 1), await import_small(c, 2)
    for version in (v1, v2):
        await pass_shadow(stores, version)
        await c.plans.Rollout(admin_pb2.RolloutRequest(version=version, actor="setup"))
    return v1, v2


async def fail_shadow(stores: Stores, version: str) -> None:
    meta = await stores.plans.get_metadata("default", version)
    assert meta is not None
    meta.verdict.outcome = table_pb2.ShadowVerdict.Outcome.OUTCOME_FAIL
    meta.verdict.summary = "p99 regressed beyond noise"
    await stores.plans.update_metadata(meta)


async def moves(stores: Stores) -> list[cluster_pb2.AuditEvent]:
    return [e for e in await stores.plans.read_audit("default", 50) if e.generation]


@pytest.mark.parametrize("to", [False, True], ids=["previous", "to"])
async def test_rollback_is_refused_by_the_shadow_gate_and_allowed_by_skipping_it_audited(
    state_url: str, stores: Stores, to: bool
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1, _ = await two_generations(c, stores)
        await fail_shadow(stores, v1)
        request = admin_pb2.RollbackRequest(actor="carol", to_version=v1 if to else "")
        refusal = await refused_by(c.plans.Rollback(request))
        assert (refusal.action, refusal.version) == ("rollback", v1)
        assert [r.gate for r in refusal.refusals] == ["shadow"]
        assert "fail" in refusal.refusals[0].message
        assert (await stores.plans.get_active("default")).generation == 2  # type: ignore[union-attr]
        request.skip_gates.append("shadow")
        message = await refused(c.plans.Rollback(request), grpc.StatusCode.INVALID_ARGUMENT)
        assert message.startswith("reason:")  # a skip needs a reason
        request.reason = "incident 42: v2 drops keys"
        back = await c.plans.Rollback(request)
        assert (back.version, back.generation, back.action) == (v1, 3, "rollback")
        event = (await moves(stores))[-1]
        assert (event.actor, event.action, event.to_version) == ("unverified:carol", "rollback", v1)
        assert event.detail.startswith("incident 42: v2 drops keys; skipped gate shadow")
        assert "would refuse" in event.detail


@pytest.mark.parametrize("to", [False, True], ids=["previous", "to"])
async def test_rollback_to_a_plan_whose_nodes_left_is_refused_by_the_destination_gate(
    state_url: str, stores: Stores, to: bool
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1, _ = await two_generations(c, stores)
        for i in range(4):
            await c.nodes.RemoveNode(admin_pb2.RemoveNodeRequest(node_id=f"node-{i}"))
        request = admin_pb2.RollbackRequest(actor="carol", to_version=v1 if to else "")
        refusal = await refused_by(c.plans.Rollback(request))
        assert [r.gate for r in refusal.refusals] == ["destinations"]
        assert "node-0" in refusal.refusals[0].message
        request.skip_gates.append("destinations")
        request.reason = "drill"
        back = await c.plans.Rollback(request)
        assert back.version == v1
        event = (await moves(stores))[-1]
        assert event.detail.startswith("drill; skipped gate destinations (would refuse:")


async def test_a_rollback_refused_by_both_gates_names_both_and_a_skip_of_one_is_not_enough(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1, _ = await two_generations(c, stores)
        await fail_shadow(stores, v1)
        for i in range(4):
            await c.nodes.RemoveNode(admin_pb2.RemoveNodeRequest(node_id=f"node-{i}"))
        request = admin_pb2.RollbackRequest(to_version=v1, reason="x", skip_gates=["shadow"])
        refusal = await refused_by(c.plans.Rollback(request))
        assert [r.gate for r in refusal.refusals] == ["destinations"]
        request.skip_gates.append("destinations")
        assert (await c.plans.Rollback(request)).version == v1


async def test_an_unknown_gate_name_is_invalid_argument_naming_the_gates(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1 = await import_small(c, 1)
        request = admin_pb2.RolloutRequest(version=v1, reason="r", skip_gates=["everything"])
        message = await refused(c.plans.Rollout(request), grpc.StatusCode.INVALID_ARGUMENT)
        assert "skip_gates: no gate named everything" in message
        assert "destinations, shadow" in message


async def test_an_inconclusive_verdict_follows_the_operators_rule(
    state_url: str, stores: Stores
) -> None:
    for rule, allowed in (("refuse", False), ("allow", True)):
        config = fast_config(state_url, shadow_inconclusive=rule)
        async with running(config) as plane, clients(plane.address) as c:
            if not allowed:  # the first round; the store keeps them for the second
                await register_nodes(c)
            version = await import_small(c, 7 if allowed else 8)
            meta = await stores.plans.get_metadata("default", version)
            assert meta is not None
            meta.verdict.CopyFrom(
                table_pb2.ShadowVerdict(
                    outcome=table_pb2.ShadowVerdict.Outcome.OUTCOME_INCONCLUSIVE,
                    summary="12 sampled requests", decided_at_unix_ms=1,
                )
            )  # fmt: skip
            await stores.plans.update_metadata(meta)
            request = admin_pb2.RolloutRequest(version=version)
            if allowed:
                assert (await c.plans.Rollout(request)).version == version
            else:
                refusal = await refused_by(c.plans.Rollout(request))
                assert [r.gate for r in refusal.refusals] == ["shadow"]
                assert "inconclusive" in refusal.refusals[0].message


async def test_a_plan_whose_destinations_are_registered_rolls_out_and_says_so(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await register_nodes(c, count=3)
        await c.nodes.SetDraining(admin_pb2.SetDrainingRequest(node_id="node-2", draining=True))
        table = table_to_proto(small_plan(seed=1, nodes=3))
        imported = await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table))
        check = imported.destinations
        assert (check.destinations, check.registered, check.eligible) == (3, 3, 2)
        assert list(check.ineligible) == ["node-2 (draining)"] and not check.missing
        await pass_shadow(stores, table.version)
        pointer = await c.plans.Rollout(admin_pb2.RolloutRequest(version=table.version))
        assert pointer.generation == 1
        shown = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=table.version))
        assert shown.summary.destinations.registered == 3
