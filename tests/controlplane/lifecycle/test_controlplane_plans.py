"""PlanService over real gRPC: import, list, show, diff, build and status (on the state twin).

Pointer moves are in test_controlplane_rollout.py, their activation gates in
test_controlplane_gates.py.
"""

from __future__ import annotations

import grpc
import pytest

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.server import ControlPlane
from dataplane.core.keys import hash_key
from dataplane.core.table_codec import table_to_proto
from tests.support.controlplane import (
    SKIP_ALL,
    clients,
    fast_config,
    running,
    traffic,
)
from tests.support.factories import small_plan
from tests.support.plan_service import import_small, refused
from tests.support.polling import eventually

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


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
