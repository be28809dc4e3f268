"""Automatic mode's switch over real gRPC and cachectl: SetAutoMode audited with the actor,
`cachectl plan auto enable|disable`, and `cachectl status` (table and JSON) showing the mode,
the guard and the last verdicts; the authenticated caller is the actor when auth is on."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from cachectl.main import main
from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness
from controlplane.lifecycle.auto_mode import AutoPilot
from controlplane.lifecycle.live_guard import AUTO_ACTOR
from controlplane.lifecycle.live_plan import PlanDefaults
from controlplane.lifecycle.pointer_moves import rollout
from controlplane.lifecycle.rollout_gates import DestinationGate
from controlplane.lifecycle.shadow import ShadowBudget
from controlplane.lifecycle.verdict_gate import ShadowVerdictGate
from controlplane.metrics import ControlPlaneMetrics
from controlplane.services.auth import token_hash
from tests.support.controlplane import clients, fast_config, running
from tests.support.factories import store_plan

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


async def cachectl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    def run() -> int:
        try:
            return main(list(argv))
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 2

    code = await asyncio.to_thread(run)
    return code, capsys.readouterr().out


def first_json(out: str) -> dict[str, object]:
    """The JSON document cachectl printed (the in-process control plane logs around it)."""
    start = 0 if out.startswith("{") else out.index("\n{") + 1
    document, _ = json.JSONDecoder().raw_decode(out[start:])
    assert isinstance(document, dict)
    return document


async def test_cachectl_turns_automatic_mode_on_and_off_and_status_shows_it(
    redis_url: str, stores: Stores, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running(fast_config(redis_url)) as plane:
        target = ("--target", plane.address)
        code, out = await cachectl(
            capsys, "plan", "auto", "enable", "--pool", "p1", "--reason", "trial", "--actor",
            "alice", *target,
        )  # fmt: skip
        assert code == 0 and "automatic mode: on (set by unverified:alice: trial)" in out
        await stores.plans.put_guard(
            cluster_pb2.GuardState(
                pool="p1", phase=cluster_pb2.GuardState.PHASE_FIRED, version="p0123456789abcdef",
                action="disable", detail="regressed: p99 TTFT 0.2 s before -> 2.0 s after",
            )
        )  # fmt: skip
        code, out = await cachectl(capsys, "status", "--pool", "p1", *target)
        assert code == 0 and "automatic mode: on" in out
        assert "live guard: fired (p0123456789abcdef, disabled): regressed" in out
        code, out = await cachectl(capsys, "status", "--pool", "p1", "--json", *target)
        pool = first_json(out)["pools"][0]  # type: ignore[index]
        assert pool["auto_mode"]["enabled"] is True and pool["guard"]["phase"] == "PHASE_FIRED"
        code, out = await cachectl(
            capsys, "plan", "auto", "disable", "--pool", "p1", "--json", "--actor", "bob", *target
        )
        assert code == 0 and first_json(out).get("enabled", False) is False
    mode = await stores.plans.get_auto_mode("p1")
    assert mode is not None and not mode.enabled and mode.actor == "unverified:bob"
    actions = [(e.action, e.actor, e.detail) for e in await stores.plans.read_audit("p1", 10)]
    assert ("auto_enable", "unverified:alice", "trial") in actions
    assert ("auto_disable", "unverified:bob", "") in actions


async def test_a_bad_pool_name_is_invalid_argument(redis_url: str) -> None:
    async with running(fast_config(redis_url)) as plane, clients(plane.address) as c:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.plans.SetAutoMode(admin_pb2.SetAutoModeRequest(pool="bad pool!", enabled=True))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_with_auth_the_token_holder_is_the_actor_and_read_may_not_switch(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(
        f"- {{name: ops-alice, role: write, sha256: {token_hash('w-token')}}}\n"
        f"- {{name: dashboards, role: read, sha256: {token_hash('r-token')}}}\n"
    )
    config = replace(fast_config(redis_url), auth_file=auth)
    async with running(config) as plane, clients(plane.address) as c:
        request = admin_pb2.SetAutoModeRequest(pool="p2", enabled=True, actor="mallory")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await c.plans.SetAutoMode(request, metadata=(("authorization", "Bearer r-token"),))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        mode = await c.plans.SetAutoMode(request, metadata=(("authorization", "Bearer w-token"),))
    assert mode.enabled and mode.actor == "ops-alice"
    events = await stores.plans.read_audit("p2", 5)
    assert events[-1].action == "auto_enable" and events[-1].actor == "ops-alice"


def pilot(stores: Stores) -> AutoPilot:
    liveness = Liveness(3.0, 250)
    return AutoPilot(
        stores, ControlPlaneMetrics(), defaults=PlanDefaults(), liveness=liveness,
        gates=[DestinationGate(liveness), ShadowVerdictGate()], budget=ShadowBudget(),
    )  # fmt: skip


async def test_a_round_runs_only_where_the_mode_is_on_and_records_its_decision(
    state_stores: Stores,
) -> None:
    stores = state_stores
    for pool, enabled in (("on", True), ("off", False)):
        await stores.plans.add_pool(pool)
        await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool=pool, enabled=enabled))
    done = await pilot(stores).round_all(now_ms=5_000)
    assert done == {"on": "skipped"}  # no nodes yet: nothing to build
    mode = await stores.plans.get_auto_mode("on")
    assert mode is not None and mode.last_decision.startswith("no plan built: pool on has no")
    assert mode.last_decision_at_unix_ms == 5_000
    off = await stores.plans.get_auto_mode("off")
    assert off is not None and not off.last_decision


async def test_a_round_waits_while_the_guard_watches(state_stores: Stores) -> None:
    stores = state_stores
    await stores.plans.add_pool("p")
    await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="p", enabled=True))
    await stores.plans.put_guard(
        cluster_pb2.GuardState(pool="p", phase=cluster_pb2.GuardState.PHASE_WATCHING, version="v")
    )
    outcome, decision = await pilot(stores).round("p", now_ms=1)
    assert outcome == "waiting" and "live guard" in decision


async def test_a_round_waits_for_the_guard_to_pick_up_the_last_automatic_rollout(
    state_stores: Stores,
) -> None:
    stores = state_stores
    version = await store_plan(stores)
    await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="default", enabled=True))
    await rollout(stores, "default", version, None, actor=AUTO_ACTOR, reason="")
    outcome, decision = await pilot(stores).round("default", now_ms=1)
    assert outcome == "waiting" and f"watch {version}" in decision
