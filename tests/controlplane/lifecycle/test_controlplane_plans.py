"""PlanService over real gRPC: import, list, show, diff, build, rollout, rollback, status
(on the state twin; the concurrent-rollout race also on a real Redis)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.server import ControlPlane
from dataplane.core.keys import hash_key
from dataplane.core.table_codec import table_to_proto
from servekit.status_details import unpack_details
from tests.support.controlplane import (
    SKIP_ALL,
    Clients,
    clients,
    fast_config,
    register_nodes,
    running,
    traffic,
)
from tests.support.factories import small_plan
from tests.support.polling import eventually
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


async def refused(call: object, code: grpc.StatusCode) -> str:
    """Await an RPC that must fail with ``code``; returns its message."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() == code, raised.value.details()
    details = raised.value.details() or ""
    assert details
    return details


async def pass_shadow(stores: Stores, version: str, pool: str = "default") -> None:
    """Record a passing shadow verdict on ``version`` (what ``plan shadow`` writes)."""
    meta = await stores.plans.get_metadata(pool, version)
    assert meta is not None
    meta.verdict.CopyFrom(
        table_pb2.ShadowVerdict(
            outcome=table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS,
            summary="test",
            decided_at_unix_ms=1,
        )
    )
    await stores.plans.update_metadata(meta)


async def import_small(
    c: Clients, seed: int, *, pool: str = "default", actor: str = "alice"
) -> str:
    table = table_to_proto(small_plan(pool, seed=seed))
    summary = await c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table, actor=actor))
    return summary.metadata.version


async def test_import_is_validated_idempotent_and_audited_once(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        table = small_plan("blue", seed=1)
        request = admin_pb2.ImportPlanRequest(table=table_to_proto(table), actor="alice", note="n")
        first = await c.plans.ImportPlan(request)
        again = await c.plans.ImportPlan(request)
        assert first.metadata.version == again.metadata.version == table.version
        assert first.metadata.pool == "blue" and first.metadata.source == "import"
        assert first.metadata.created_by == "unverified:alice" and not first.active
        assert first.metadata.stats.admitted_keys == table.num_keys
        audit = await stores.plans.read_audit("blue", 10)
        assert [(e.action, e.actor, e.to_version) for e in audit] == [
            ("import", "unverified:alice", table.version)
        ]


async def test_import_refuses_bad_tables_with_invalid_argument(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        good = table_to_proto(small_plan(seed=1))
        garbage = table_pb2.RoutingTable()
        garbage.CopyFrom(good)
        garbage.key_hashes = b"\x01\x02\x03"  # not a multiple of 8 bytes
        tampered = table_pb2.RoutingTable()
        tampered.CopyFrom(good)
        tampered.node_ids[0] = "someone-else"  # content no longer matches the version
        bad_pool = table_to_proto(small_plan("Bad.Pool", seed=1))
        cases = [
            (garbage, "key_hashes"),
            (tampered, "hash"),
            (bad_pool, "pool"),
            (table_pb2.RoutingTable(), "no table"),
        ]
        for table, word in cases:
            message = await refused(
                c.plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table)),
                grpc.StatusCode.INVALID_ARGUMENT,
            )
            assert word in message


async def test_list_show_and_diff(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1 = await import_small(c, 1)
        v2 = await import_small(c, 2)
        listed = await c.plans.ListPlans(admin_pb2.ListPlansRequest())
        assert [p.metadata.version for p in listed.plans] == [v2, v1]
        assert not listed.HasField("active")

        shown = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=v1, top_keys=3))
        assert shown.summary.metadata.version == v1 and not shown.HasField("table")
        assert len(shown.top_keys) == 3
        top = shown.top_keys[0]
        assert top.key.startswith("key-") and top.key_hash == hash_key(top.key)
        assert top.rate >= shown.top_keys[1].rate and top.node_ids
        with_table = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=v1, include_table=True))
        assert with_table.table.version == v1 and len(with_table.top_keys) == 10

        diff = await c.plans.DiffPlans(
            admin_pb2.DiffPlansRequest(from_version=v1, to_version=v2, limit=2)
        )
        assert (diff.from_version, diff.to_version) == (v1, v2)
        either = diff.keys_added + diff.keys_removed + diff.keys_moved + diff.keys_unchanged
        assert diff.churn == pytest.approx(1 - diff.keys_unchanged / either)
        assert len(diff.moves) == min(2, diff.keys_moved)


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


async def test_bad_names_are_invalid_argument_with_a_message(state_url: str) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        cases = [
            (c.plans.Rollout(admin_pb2.RolloutRequest(version="v1")), "version"),
            (c.plans.Rollout(admin_pb2.RolloutRequest(pool="Bad Pool", version="p" + "0" * 16)),
             "pool"),
            (c.plans.GetPlan(admin_pb2.GetPlanRequest(version="latest")), "version"),
            (c.plans.DiffPlans(admin_pb2.DiffPlansRequest(from_version="x", to_version="y")),
             "version"),
            (c.plans.ListPlans(admin_pb2.ListPlansRequest(pool="../etc")), "pool"),
            (c.plans.GetStatus(admin_pb2.GetStatusRequest(pool="{x}")), "pool"),
            (c.plans.BuildPlan(admin_pb2.BuildPlanRequest(pool="a b")), "pool"),
            (c.plans.BuildPlan(admin_pb2.BuildPlanRequest(placement="best")), "placement"),
            (c.plans.Rollback(admin_pb2.RollbackRequest(to_version="old")), "version"),
        ]  # fmt: skip
        for call, word in cases:
            assert word in await refused(call, grpc.StatusCode.INVALID_ARGUMENT)


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


async def test_shadow_without_a_trace_or_with_bad_input_is_refused_by_name(
    state_url: str,
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        v1 = await import_small(c, 1)
        message = await refused(
            c.plans.ShadowPlan(admin_pb2.ShadowPlanRequest(version=v1)),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "no sampled requests" in message and "--trace" in message
        message = await refused(
            c.plans.ShadowPlan(admin_pb2.ShadowPlanRequest(version=v1, profile="gpt-9")),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "profile" in message
        message = await refused(
            c.plans.ShadowPlan(
                admin_pb2.ShadowPlanRequest(version=v1, trace_path="/nonexistent/trace.jsonl")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "trace_path" in message
        await refused(
            c.plans.ShadowPlan(admin_pb2.ShadowPlanRequest(version="p0000000000000000")),
            grpc.StatusCode.NOT_FOUND,
        )


async def test_build_plan_from_two_routers_traffic_admits_the_hot_keys(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        message = await refused(
            c.plans.BuildPlan(admin_pb2.BuildPlanRequest()), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "no healthy" in message
        for i in range(3):
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id=f"n{i}", address=f"h:{i + 1}"))
        message = await refused(
            c.plans.BuildPlan(admin_pb2.BuildPlanRequest()), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "no traffic" in message

        cold = {f"cold-{i}": 1 for i in range(20)}
        for window in range(3):
            for router in ("r1", "r2"):
                counts = {"hot-a": 400, "hot-b": 200, "warm": 50, **cold}
                await stores.telemetry.add_traffic(traffic(router, window, counts, total=1000))
        built = await c.plans.BuildPlan(
            admin_pb2.BuildPlanRequest(slots_per_node=1, actor="alice", note="from live")
        )
        meta = built.metadata
        assert meta.source == "live" and meta.created_by == "unverified:alice" and not built.active
        assert meta.params.slots_per_node == 1 and meta.params.placement == "lpt"
        assert meta.params.q_cap == pytest.approx(200 / 3, rel=1e-3)  # auto: total / nodes
        assert meta.stats.total_rate == pytest.approx(200, rel=1e-3)  # 2 routers x 1000 / 10 s
        shown = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=meta.version))
        admitted = [k.key for k in shown.top_keys]
        assert admitted[:2] == ["hot-a", "hot-b"]  # 3 slots: hot-a takes 2 (80/s > q_cap)
        assert len(shown.top_keys[0].node_ids) == 2
        assert meta.stats.tail_rate == pytest.approx(200 - 120, rel=1e-3)
        audit = await stores.plans.read_audit("default", 10)
        assert audit[-1].action == "build" and audit[-1].actor == "unverified:alice"


async def test_status_shows_pointer_acks_nodes_and_leader(state_url: str, stores: Stores) -> None:
    async with (
        running(fast_config(state_url, instance_id="cp-a")) as plane,
        clients(plane.address) as c,
    ):
        v1 = await import_small(c, 1)
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n1", address="h:1"))
        await c.plans.Rollout(admin_pb2.RolloutRequest(version=v1, actor="alice", **SKIP_ALL))
        await stores.cluster.put_ack(
            cluster_pb2.RouterAck(
                router_id="r1", pool="default", version=v1, generation=1, accepted=True
            )
        )
        await stores.cluster.put_ack(
            cluster_pb2.RouterAck(
                router_id="r2", pool="default", version=v1, generation=1, reason="bad table"
            )
        )

        async def leading() -> bool:
            return plane.leader is not None and plane.leader.is_leader

        await eventually(leading)
        status = await c.plans.GetStatus(admin_pb2.GetStatusRequest())
        assert status.leader_id == "cp-a" and status.is_leader
        (pool,) = status.pools
        assert (pool.pool, pool.active.version, pool.active.generation) == ("default", v1, 1)
        assert [(r.router_id, r.accepted, r.reason) for r in pool.routers] == [
            ("r1", True, ""),
            ("r2", False, "bad table"),
        ]
        assert [n.record.node_id for n in pool.nodes] == ["n1"]
        # forced past the destination gate: status names the plan's unregistered destinations
        check = pool.active_destinations
        assert (check.destinations, check.registered, check.eligible) == (4, 0, 0)
        assert list(check.missing) == [f"node-{i}" for i in range(4)]


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


async def test_the_injected_clock_stamps_imported_plans_and_their_audit(
    state_url: str, stores: Stores
) -> None:
    plane = ControlPlane(fast_config(state_url), clock=lambda: 1_234_567_890_123)
    await plane.start()
    try:
        async with clients(plane.address) as c:
            version = await import_small(c, 1)
    finally:
        await plane.stop()
    meta = await stores.plans.get_metadata("default", version)
    assert meta is not None and meta.created_at_unix_ms == 1_234_567_890_123
    audit = await stores.plans.read_audit("default", 10)
    assert audit[0].at_unix_ms == 1_234_567_890_123


async def test_a_build_with_an_active_plan_is_churn_aware_and_records_its_churn(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        for i in range(4):
            await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id=f"n{i}", address=f"h:{i + 1}"))
        counts = {f"key-{i}": 100 - 5 * i for i in range(12)}
        for window in range(3):
            await stores.telemetry.add_traffic(traffic("r1", window, counts, total=2000))
        first = (await c.plans.BuildPlan(admin_pb2.BuildPlanRequest(slots_per_node=3))).metadata
        assert not first.HasField("replan")  # nothing was active
        await c.plans.Rollout(admin_pb2.RolloutRequest(**SKIP_ALL, version=first.version))
        drifted = {k: v + (7 if i % 2 else -7) for i, (k, v) in enumerate(counts.items())}
        for window in range(3, 9):
            await stores.telemetry.add_traffic(traffic("r1", window, drifted, total=2000))
        second = (await c.plans.BuildPlan(admin_pb2.BuildPlanRequest(slots_per_node=3))).metadata
        info = second.replan
        assert info.from_version == first.version
        assert info.replanner in ("churn_aware", "fresh")
        diff = await c.plans.DiffPlans(
            admin_pb2.DiffPlansRequest(from_version=first.version, to_version=second.version)
        )
        assert info.churn == pytest.approx(diff.churn)
        assert info.churn <= info.fresh_churn
        assert second.stats.planned_imbalance <= info.imbalance_bound * (1 + 1e-9)
