"""The live path end to end over real gRPC and a real Redis: a control plane, two routers, stub
agents streaming NodeReports, and cachectl as operators run it (issue 4's acceptance)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import pytest

from cacheroute.v1 import admin_pb2, routing_pb2
from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import encode_table
from tests.support.controlplane import (
    SKIP_ALL,
    SKIP_ARGS,
)
from tests.support.factories import metadata_for
from tests.support.live_cluster import (
    KEYS,
    answers,
    cluster,
    follow,
    import_plan,
    plan_for,
    warm_keys,
)
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow]


async def test_rollout_reaches_both_routers_within_a_second_and_rollback_restores(
    redis_url: str, tmp_path: Path
) -> None:
    first, second = plan_for(1), plan_for(2)
    assert warm_keys(first) and {
        k for k in KEYS if first.destination_ids(hash_key(k)) != second.destination_ids(hash_key(k))
    }, "the two plans must differ for the test to mean anything"
    async with cluster(redis_url) as live:
        decisions = await answers(live.stubs[0], KEYS[:5])
        assert {d.reason for d in decisions} == {routing_pb2.ROUTE_REASON_NO_TABLE}

        await import_plan(live, first, tmp_path / "first.plan")
        await import_plan(live, second, tmp_path / "second.plan")
        assert await live.cachectl("plan", "rollout", first.version, *SKIP_ARGS) == 0

        async def both_acked(generation: int) -> bool:
            acked = await live.generations()
            return all(acked.get(r.config.router_id) == generation for r in live.routers)

        await eventually(lambda: both_acked(1), timeout=1.0)  # after the pointer moved
        for stub in live.stubs:
            assert await follow(stub, first, 1)

        assert await live.cachectl("plan", "rollout", second.version, *SKIP_ARGS) == 0
        await eventually(lambda: both_acked(2), timeout=1.0)
        for stub in live.stubs:
            assert await follow(stub, second, 2)

        assert await live.cachectl("plan", "rollback", *SKIP_ARGS) == 0
        await eventually(lambda: both_acked(3), timeout=1.0)
        for stub in live.stubs:
            assert await follow(stub, first, 3)  # the first plan's answers, a newer generation


async def test_two_concurrent_rollouts_exactly_one_wins(redis_url: str, stores: Stores) -> None:
    first, second = plan_for(1), plan_for(2)
    async with cluster(redis_url) as live:
        for table in (first, second):
            await stores.plans.put_plan(encode_table(table), metadata_for(table))
        calls = [
            live.admin.plans.Rollout(
                admin_pb2.RolloutRequest(
                    version=v, expected_generation=0, actor=f"op-{i}", **SKIP_ALL
                )
            )
            for i, v in enumerate((first.version, second.version))
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        losers = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(losers) == 1
        assert losers[0].code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "generation 1" in (losers[0].details() or "")
        active = await stores.plans.get_active("default")
        assert active is not None
        assert active.generation == 1


async def test_a_router_started_after_a_rollout_serves_the_table_from_its_first_request(
    redis_url: str, tmp_path: Path
) -> None:
    table = plan_for(3)
    async with cluster(redis_url) as live:
        await import_plan(live, table, tmp_path / "plan")
        assert await live.cachectl("plan", "rollout", table.version, *SKIP_ARGS) == 0
        late = await live.add_router("router-late")
        first = await late.Route(routing_pb2.RouteRequest(key=warm_keys(table)[0]))
        assert (first.version, first.generation) == (table.version, 1)
        assert await follow(late, table, 1)


async def test_an_invalid_table_is_nacked_with_a_reason_and_the_last_good_one_serves(
    redis_url: str, tmp_path: Path, stores: Stores
) -> None:
    good = plan_for(4)
    async with cluster(redis_url) as live:
        await import_plan(live, good, tmp_path / "plan")
        assert await live.cachectl("plan", "rollout", good.version, *SKIP_ARGS) == 0
        # A corrupt table under a valid-looking version, as a bad writer or a disk fault would
        # leave it: routers must refuse it. (ImportPlan itself validates, so write to Redis.)
        bad = plan_for(5)
        await stores.plans.put_plan(b"\x0a\x05not a table", metadata_for(bad))
        # the control plane's gates refuse it too, skips or not (gate "table", never skipped);
        # the bad writer moves the pointer in the store itself, and the routers must NACK it
        assert await live.cachectl("plan", "rollout", bad.version) == 1
        assert await live.cachectl("plan", "rollout", bad.version, *SKIP_ARGS) == 1
        await stores.plans.move_active(
            "default", bad.version, expected_generation=1, actor="bad-writer", action="rollout"
        )

        async def both_nacked() -> bool:
            status = await live.admin.plans.GetStatus(admin_pb2.GetStatusRequest(pool="default"))
            nacks = [
                ack
                for pool in status.pools
                for ack in pool.routers
                if not ack.accepted and ack.generation == 2
            ]
            return len(nacks) == 2 and all(ack.reason for ack in nacks)

        await eventually(both_nacked, timeout=2.0)
        for stub in live.stubs:
            assert await follow(stub, good, 1)


async def test_plan_disable_makes_both_routers_answer_no_table_and_rollback_restores(
    redis_url: str, tmp_path: Path, stores: Stores
) -> None:
    table = plan_for(6)
    async with cluster(redis_url) as live:
        await import_plan(live, table, tmp_path / "plan")
        assert await live.cachectl("plan", "rollout", table.version, *SKIP_ARGS) == 0

        async def all_follow(plan: RoutingTable, generation: int) -> bool:
            return all([await follow(stub, plan, generation) for stub in live.stubs])

        await eventually(lambda: all_follow(table, 1), timeout=1.0)
        assert await live.cachectl("plan", "disable", "--reason", "incident") == 0

        async def all_flat() -> bool:
            for stub in live.stubs:
                for decision in await answers(stub, warm_keys(table)):
                    if decision.reason != routing_pb2.ROUTE_REASON_NO_TABLE:
                        return False
                    if (decision.generation, decision.version) != (2, ""):
                        return False
            return True

        await eventually(all_flat, timeout=1.0)
        assert await live.cachectl("plan", "rollback", *SKIP_ARGS) == 0
        await eventually(lambda: all_follow(table, 3), timeout=1.0)
        audit = await stores.plans.read_audit("default", 20)
        assert [(e.action, e.detail) for e in audit if e.generation][1] == ("disable", "incident")


async def test_a_plan_for_unknown_nodes_is_refused_by_cachectl_and_status_shows_them(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rates = tmp_path / "rates.csv"
    rates.write_text("key,rate\nacme/bot,40\nglobex/app,12\n")
    path = tmp_path / "plan.bin"
    async with cluster(redis_url) as live:
        built = await live.cachectl(
            "plan", "build", "--rates", str(rates), "--num-nodes", "2", "--q-cap", "20",
            "--slots-per-node", "2", "--out", str(path),
        )  # fmt: skip
        assert built == 0
        capsys.readouterr()
        assert await live.cachectl("plan", "import", str(path)) == 0
        out = capsys.readouterr().out
        assert "destinations: 0 of 2 registered in the pool" in out and "node-0" in out
        # The version by its shape: the in-process servers' log lines share captured stdout, and
        # a busy machine's warning can come first.
        version = re.search(r"\bp[0-9a-f]{16}\b", out).group(0)  # type: ignore[union-attr]
        assert await live.cachectl("plan", "rollout", version) == 1
        err = capsys.readouterr().err
        assert (
            "not registered nodes of pool default: node-0, node-1" in err
            and "--skip-gate destinations" in err
        )
        assert await live.cachectl("plan", "rollout", version, *SKIP_ARGS) == 0
        capsys.readouterr()
        assert await live.cachectl("status") == 0
        assert "not registered (2 holding warm keys): node-0, node-1" in capsys.readouterr().out
