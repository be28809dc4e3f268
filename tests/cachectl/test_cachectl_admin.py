"""cachectl against a real control plane: plans, nodes, status; refusals exit 2 with one line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from cachectl.admin_client import age_text, duration_text
from cacheroute.v1 import cluster_pb2, table_pb2
from cacheroute_state import Stores
from cacheroute_state.embedded import EmbeddedRedis
from controlplane.server import ControlPlane
from dataplane.core.table_codec import encode_table
from sim.planning import make_stream, plan_for
from sim.workloads.registry import make_workload
from tests.support.cli import ROOT, Cli, run_main
from tests.support.controlplane import SKIP_ARGS, fast_config, running, traffic
from tests.support.factories import metadata_for, small_plan
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


def write_plan(tmp_path: Path, seed: int) -> tuple[Path, str]:
    table = small_plan(seed=seed)
    path = tmp_path / f"plan-{seed}.pb"
    path.write_bytes(encode_table(table))
    return path, table.version


async def test_nodes_add_list_drain_undrain_remove(cli: Cli, stores: Stores) -> None:
    out = await cli.ok("nodes", "add", "gpu-1", "--address", "10.0.0.1:8000", "--weight", "2")
    assert "gpu-1" in out
    await cli.ok("nodes", "add", "gpu-2", "--address", "10.0.0.2:8000")
    table = (await cli.ok("nodes", "list")).splitlines()
    assert table[0].split()[:4] == ["NODE", "ADDRESS", "KIND", "STATE"]
    assert table[1].split()[:4] == ["gpu-1", "10.0.0.1:8000", "static", "healthy"]
    drained = await cli.json("nodes", "drain", "gpu-2")
    assert drained["record"]["draining"] is True
    assert "draining" in (await cli.ok("nodes", "list")).splitlines()[2]
    await cli.ok("nodes", "undrain", "gpu-2")
    listed = await cli.json("nodes", "list")
    assert [(n["record"]["node_id"], n["record"]["draining"]) for n in listed["nodes"]] == [
        ("gpu-1", False),
        ("gpu-2", False),
    ]
    assert (await cli.json("nodes", "remove", "gpu-1"))["removed"] is True
    assert "not registered" in await cli.refused("nodes", "remove", "gpu-1")
    audit = await stores.plans.read_audit("default", 10)
    assert {e.actor for e in audit} == {"unverified:tester"}


async def test_server_refusals_exit_2_with_one_line(cli: Cli) -> None:
    line = await cli.refused("nodes", "add", "bad id", "--address", "h:1")
    assert "INVALID_ARGUMENT" in line and "node id" in line
    assert "port" in await cli.refused("nodes", "add", "n1", "--address", "h:0")
    assert "pool" in await cli.refused("nodes", "list", "--pool", "Bad Pool")
    assert "NOT_FOUND" in await cli.refused("nodes", "drain", "ghost")


async def test_unreachable_target_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = await asyncio.to_thread(
        run_main, ["status", "--target", "127.0.0.1:1", "--timeout", "2"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "cannot reach the control plane at 127.0.0.1:1" in err[0]


async def test_status_shows_pointer_routers_and_nodes(cli: Cli, stores: Stores) -> None:
    table = small_plan(seed=1)
    version = table.version
    await stores.plans.put_plan(encode_table(table), metadata_for(table))
    await stores.plans.move_active(
        "default", version, expected_generation=0, actor="tester", action="rollout"
    )
    await cli.ok("nodes", "add", "n1", "--address", "h:1")
    await stores.cluster.put_ack(
        cluster_pb2.RouterAck(
            router_id="r1", pool="default", version=version, generation=1, accepted=True
        )
    )
    await stores.cluster.put_ack(
        cluster_pb2.RouterAck(router_id="r2", pool="default", version=version, generation=1,
                              reason="set member out of range")
    )  # fmt: skip
    now_ms = int(time.time() * 1000)
    await stores.cluster.put_ack(
        cluster_pb2.RouterAck(router_id="r3", pool="default", version=version, generation=1,
                              accepted=True, at_unix_ms=now_ms - 4 * 60_000)
    )  # fmt: skip
    await stores.cluster.put_ack(  # silent past the 5-minute expiry: gone
        cluster_pb2.RouterAck(router_id="r4", pool="default", version=version, generation=1,
                              accepted=True, at_unix_ms=now_ms - 6 * 60_000)
    )  # fmt: skip
    await stores.cluster.put_ack(  # announced at its first sync, has applied nothing yet
        cluster_pb2.RouterAck(router_id="r5", pool="default", accepted=True, at_unix_ms=now_ms)
    )
    out = await cli.ok("status")
    assert "routers that stopped reporting: r3 (4m ago)" in out
    assert "r1 (" not in out.split("stopped reporting")[1].splitlines()[0]
    assert f"pool default: active {version} generation 1 (rollout by tester" in out
    assert "routers: 2 of 4 applied generation 1" in out
    assert "r4" not in out and "not shown: 1" in out
    (r5,) = [line for line in out.splitlines() if line.startswith("r5")]
    assert "starting" in r5.split()
    assert "NACK" in out and "set member out of range" in out
    assert "n1" in out
    status = await cli.json("status")
    assert status["pools"][0]["active"]["generation"] == "1"  # proto3 JSON: uint64 as text
    assert status["leader_id"] == "cp-test"


async def test_plan_import_list_show_diff(cli: Cli, tmp_path: Path) -> None:
    first, v1 = write_plan(tmp_path, 1)
    second, v2 = write_plan(tmp_path, 2)
    assert v1 in await cli.ok("plan", "import", str(first), "--note", "from the csv")
    imported = await cli.json("plan", "import", str(second))
    assert (
        imported["metadata"]["version"] == v2
        and imported["metadata"]["created_by"] == "unverified:tester"
    )
    listing = (await cli.ok("plan", "list")).splitlines()
    assert listing[0] == "pool default: no active plan"
    assert [row.split()[0] for row in listing[2:]] == [v2, v1]
    shown = await cli.ok("plan", "show", v1, "--top", "3")
    assert "KEY" in shown and "key-" in shown
    as_json = await cli.json("plan", "show", v1)
    assert as_json["summary"]["metadata"]["note"] == "from the csv"
    assert len(as_json["top_keys"]) == 10
    diff = await cli.json("plan", "diff", v1, v2)
    assert diff["from_version"] == v1 and 0 <= diff["churn"] <= 1
    assert "churn" in await cli.ok("plan", "diff", v1, v2)


async def add_plan_nodes(cli: Cli, count: int = 4) -> None:
    """node-0..: the destinations of ``small_plan``, so its rollouts pass the destination gate."""
    for i in range(count):
        await cli.ok("nodes", "add", f"node-{i}", "--address", f"127.0.0.1:{9000 + i}")


async def test_plan_rollout_rollback_and_conflicts(cli: Cli, tmp_path: Path) -> None:
    await add_plan_nodes(cli)
    versions = []
    for seed in (1, 2, 3):
        path, version = write_plan(tmp_path, seed)
        await cli.ok("plan", "import", str(path))
        versions.append(version)
    v1, v2, v3 = versions
    assert "generation 1" in await cli.ok("plan", "rollout", v1, *SKIP_ARGS)
    pointer = await cli.json("plan", "rollout", v2, *SKIP_ARGS, "--expect-generation", "1")
    assert (pointer["version"], pointer["generation"]) == (v2, "2")
    line = await cli.refused("plan", "rollout", v3, *SKIP_ARGS, "--expect-generation", "1")
    assert "FAILED_PRECONDITION" in line and "generation 2" in line and "tester" in line
    code, out, err = await cli.run("plan", "rollback", "--json")  # v1 was never replayed
    assert code == 1 and "refused by: shadow" in err
    assert [r["gate"] for r in json.loads(out)["refused"]["refusals"]] == ["shadow"]
    skip = ("--skip-gate", "shadow", "--reason", "bad plan")
    back = await cli.ok("plan", "rollback", *skip)
    assert f"active {v1} generation 3 (rollback by unverified:tester" in back
    assert f"active {v3} generation 4" in await cli.ok("plan", "rollback", "--to", v3, *skip)
    line = await cli.refused("plan", "rollback", "--skip-gate", "shadow")
    assert "--skip-gate needs --reason" in line
    line = await cli.refused("plan", "rollout", v1, "--force")
    assert "--force is gone" in line and "--skip-gate shadow" in line
    missing = await cli.refused("plan", "rollout", "p0123456789abcdef")
    assert "NOT_FOUND" in missing
    assert "INVALID_ARGUMENT" in await cli.refused("plan", "rollout", "latest")
    listed = await cli.json("plan", "list")
    assert listed["active"]["version"] == v3 and listed["active"]["generation"] == "4"


async def test_plan_shadow_replays_the_sampled_trace_and_list_shows_the_verdict(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    stream = make_stream(
        make_workload("paper"), qps=100.0, duration_s=30.0, seed=5, prior_window_s=30.0
    )
    table = plan_for("lpt", stream, [f"n{i:02d}" for i in range(30)], q_cap=12.094)
    assert table is not None
    path = tmp_path / "sim-plan.pb"
    path.write_bytes(encode_table(table))
    await cli.ok("plan", "import", str(path))
    line = await cli.refused("plan", "shadow", table.version, "--pool", "sim")
    assert "FAILED_PRECONDITION" in line and "--trace" in line
    start = int(time.time() * 1000) - 45_000
    await stores.telemetry.add_samples([
        cluster_pb2.SampledRequest(
            pool="sim", at_unix_ms=start + int(r.arrival_s * 1000), key_hash=r.key_hash,
            key=r.key, prefix_blocks=list(r.blocks[:64]),
        )
        for r in stream.requests
    ])  # fmt: skip
    report = await cli.json("plan", "shadow", table.version, "--pool", "sim", "--recent", "5")
    assert report["verdict"] in ("pass", "fail") and report["reason"]
    assert set(report["loads"]) == {"below", "near"}
    listed = (await cli.ok("plan", "list", "--pool", "sim")).splitlines()
    header = next(i for i, line in enumerate(listed) if line.startswith("VERSION"))
    assert "SHADOW" in listed[header].split()
    assert report["verdict"] in listed[header + 1].split()
    shown = await cli.ok("plan", "show", table.version, "--pool", "sim")
    assert f"shadow verdict: {report['verdict']}" in shown
    both = await cli.run("plan", "shadow", table.version, "--trace", "x", "--recent", "1")
    assert both[0] == 2 and "alternatives" in both[2]


async def test_rollout_needs_a_passing_shadow_verdict_or_a_named_skip_which_the_audit_records(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    for i in range(4):  # the plan's destinations, so only the shadow gate refuses
        await cli.ok("nodes", "add", f"node-{i}", "--address", f"h:{i + 1}")
    path, version = write_plan(tmp_path, 7)
    await cli.ok("plan", "import", str(path))
    code, out, err = await cli.run("plan", "rollout", version, "--json")
    assert code == 1
    refused = json.loads(out)["refused"]  # the typed details, not the message
    assert (refused["action"], refused["version"]) == ("rollout", version)
    assert [r["gate"] for r in refused["refusals"]] == ["shadow"]
    assert "no shadow-replay verdict" in refused["refusals"][0]["message"]
    assert f"cachectl plan shadow {version}" in err and "--skip-gate shadow" in err
    assert (await stores.plans.get_active("default")) is None  # nothing moved

    meta = await stores.plans.get_metadata("default", version)
    assert meta is not None
    fail = table_pb2.ShadowVerdict.Outcome.OUTCOME_FAIL
    meta.verdict.CopyFrom(table_pb2.ShadowVerdict(
        outcome=fail, summary="regresses beyond noise", decided_at_unix_ms=1))  # fmt: skip
    await stores.plans.update_metadata(meta)
    code, _, err = await cli.run("plan", "rollout", version)
    assert code == 1 and "verdict is fail: regresses beyond noise" in err

    skip = ("--skip-gate", "shadow", "--reason", "hotfix")
    skipped = await cli.json("plan", "rollout", version, *skip)
    assert skipped["version"] == version
    audit = await stores.plans.read_audit("default", 10)
    event = audit[-1]
    assert event.action == "rollout" and event.actor == "unverified:tester"
    assert event.detail.startswith("hotfix; skipped gate shadow (would refuse:")

    path2, version2 = write_plan(tmp_path, 8)
    await cli.ok("plan", "import", str(path2))
    meta2 = await stores.plans.get_metadata("default", version2)
    assert meta2 is not None
    passing = table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS
    meta2.verdict.CopyFrom(table_pb2.ShadowVerdict(
        outcome=passing, summary="improves beyond noise", decided_at_unix_ms=2))  # fmt: skip
    await stores.plans.update_metadata(meta2)
    assert f"active {version2}" in await cli.ok("plan", "rollout", version2)
    assert "skipped" not in (await stores.plans.read_audit("default", 10))[-1].detail
    status = await cli.ok("status")
    assert "shadow verdict of the active version: pass (improves beyond noise)" in status


async def test_a_plan_built_offline_imports_and_shows_online(cli: Cli, tmp_path: Path) -> None:
    rates = tmp_path / "rates.csv"
    rates.write_text("key,rate\nacme/bot,40\nglobex/app,12\ninitech,3\n")
    out = tmp_path / "plan.pb"
    built = await cli.json(
        "plan", "build", "--rates", str(rates), "--num-nodes", "3", "--q-cap", "10",
        "--slots-per-node", "2", "--out", str(out),
    )  # fmt: skip
    stored = await cli.json("plan", "import", str(out))
    version = built["metadata"]["version"]
    assert stored["metadata"]["version"] == version
    # the same object has the same shape offline (a file) and online (a stored version)
    offline = await cli.json("plan", "show", str(out))
    online = await cli.json("plan", "show", version)
    assert offline["summary"]["metadata"].keys() == online["summary"]["metadata"].keys()
    assert offline["summary"]["metadata"]["stats"] == online["summary"]["metadata"]["stats"]
    assert offline["top_keys"] == online["top_keys"]
    shown = await cli.json("plan", "show", version)
    assert shown["top_keys"][0]["key"] == "acme/bot"
    assert len(shown["top_keys"][0]["node_ids"]) == 3  # 40 req/s at q_cap 10: capped at R = 3
    assert "acme/bot" in await cli.ok("plan", "show", str(out))  # a file stays offline


async def test_plan_import_rejects_a_file_that_is_not_a_plan(cli: Cli, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\xff\xff\xff\xff")
    assert "not a plan file" in await cli.refused("plan", "import", str(junk))
    assert "cannot read" in await cli.refused("plan", "import", str(tmp_path / "missing.pb"))


async def test_plan_build_online_uses_live_rates(cli: Cli, stores: Stores) -> None:
    line = await cli.refused("plan", "build")
    assert "FAILED_PRECONDITION" in line and "no healthy" in line
    await cli.ok("nodes", "add", "n1", "--address", "h:1")
    await cli.ok("nodes", "add", "n2", "--address", "h:2")
    for router in ("r1", "r2"):
        await stores.telemetry.add_traffic(traffic(router, 0, {"hot": 300, "warm": 30}, total=400))
    built = await cli.json("plan", "build", "--slots-per-node", "2")
    meta = built["metadata"]
    assert (
        meta["source"] == "live"
        and meta["created_by"] == "unverified:tester"
        and not built["active"]
    )
    text = await cli.ok("plan", "build", "--q-cap", "100")
    version = text.split()[1]
    steps = [
        line.split("    ")[0] for line in text.splitlines() if line.startswith(("next:", "then:"))
    ]
    # Issue 34: the hint named the rollout, which the shadow gate then refused; it names the
    # gate's step first.
    assert steps == [
        f"next: cachectl plan shadow {version}",
        f"then: cachectl plan rollout {version}",
    ]
    code, _, err = await cli.run("plan", "rollout", version)
    assert code == 1 and "refused by: shadow" in err
    assert "--rates is required with --out" in await cli.refused("plan", "build", "--out", "x.pb")


async def test_plan_show_tells_a_missing_file_from_a_stored_version(
    cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no such plan file" in await cli.refused("plan", "show", "plan.pb")
    line = await cli.refused("plan", "show", "p0123456789abcdef")
    assert "no such plan file, and the control-plane at" in line
    assert "has no stored version p0123456789abcdef in pool default" in line
    code = await asyncio.to_thread(
        run_main, ["plan", "show", "p0123456789abcdef", "--target", "127.0.0.1:1"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no such plan file, and no control-plane answered at 127.0.0.1:1" in err


@on_redis
async def test_cachectl_subprocess_against_a_running_control_plane(plane: ControlPlane) -> None:
    env = {**os.environ, "CACHEROUTE_TARGET": plane.address}

    async def run(*argv: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cachectl", *argv, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, _ = await run("nodes", "add", "n1", "--address", "h:1")
    assert code == 0 and "n1" in out
    code, out, _ = await run("status")
    assert code == 0 and out.startswith("leader: cp-test")
    code, out, err = await run("nodes", "drain", "nobody")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("cachectl: error: NOT_FOUND: node nobody")


def test_ages_are_compact() -> None:
    assert duration_text(850) == "850ms"
    assert duration_text(12_000) == "12s"
    assert duration_text(5 * 60_000) == "5m"
    assert duration_text(3 * 3_600_000 + 5) == "3h"
    assert age_text(0) == "-"
    assert age_text(1_000, now_ms=61_000) == "1m"


@pytest.mark.redis
async def test_a_control_plane_whose_redis_is_down_is_not_called_unreachable(
    quiet_server_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    redis = EmbeddedRedis().start()
    try:
        async with running(fast_config(redis.url)) as plane:
            address = plane.address
            redis.stop()
            code = await asyncio.to_thread(
                run_main, ["status", "--target", address, "--timeout", "5"]
            )
            err = capsys.readouterr().err
    finally:
        redis.stop()
    assert code == 2
    assert f"the control plane at {address} answered, but its store is down" in err
    assert "cannot reach" not in err


async def test_audit_shows_who_did_what_filtered_by_pool_actor_action_and_time(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    await add_plan_nodes(cli)
    path, version = write_plan(tmp_path, 11)
    await cli.ok("plan", "import", str(path))
    await cli.ok("plan", "rollout", version, "--skip-gate", "shadow", "--reason", "hotfix 7")
    two_hours_ago = int(time.time() * 1000) - 2 * 3600_000
    await stores.plans.add_pool("blue")  # as a node_add there would
    await stores.plans.append_audit(
        cluster_pb2.AuditEvent(at_unix_ms=two_hours_ago, actor="cachectl:alice",
                               action="node_add", pool="blue", detail="gpu-9")
    )  # fmt: skip
    table = (await cli.ok("audit")).splitlines()
    assert table[0].split() == ["TIME", "AGE", "POOL", "ACTOR", "ACTION", "FROM", "TO", "GEN",
                                "DETAIL"]  # fmt: skip
    assert table[1].split()[2:7] == [
        "default",
        "unverified:tester",
        "rollout",
        "-",
        version,
    ]  # newest first
    assert "hotfix 7; skipped gate shadow" in table[1]
    assert table[-1].split()[2:5] == ["blue", "cachectl:alice", "node_add"]  # the oldest
    start = table[0].index("ACTION")  # aligned: every row's action starts under its header
    assert {line[start:].split()[0] for line in table[1:]} <= {"rollout", "import", "node_add"}
    mine = await cli.json("audit", "--by", "unverified:tester", "--action", "rollout")
    (event,) = mine["events"]
    assert (event["actor"], event["to_version"], event["generation"]) == (
        "unverified:tester",
        version,
        "1",
    )
    assert event["detail"].startswith("hotfix 7; skipped gate shadow (would refuse:")
    recent = await cli.json("audit", "--since", "1h")
    assert recent["events"] and all(e["pool"] == "default" for e in recent["events"])
    older = await cli.json("audit", "--until", "1h")
    assert [e["actor"] for e in older["events"]] == ["cachectl:alice"]
    assert (await cli.json("audit", "--pool", "blue"))["events"][0]["detail"] == "gpu-9"
    assert "no audit events match" in await cli.ok("audit", "--by", "nobody")
    assert "--since" in await cli.refused("audit", "--since", "yesterday")


async def test_plan_prune_keeps_the_newest_the_active_and_the_rollback_target(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    await add_plan_nodes(cli)
    versions = []
    for seed in range(21, 27):  # six versions, oldest first
        path, version = write_plan(tmp_path, seed)
        await cli.ok("plan", "import", str(path))
        versions.append(version)
        await asyncio.sleep(0.002)  # a strict creation order (ms stamps)
    oldest, second, *_ = versions
    await cli.ok("plan", "rollout", second, *SKIP_ARGS)
    await cli.ok("plan", "rollout", oldest, *SKIP_ARGS)  # active: the oldest; target: second
    report = (await cli.ok("plan", "prune", "--keep", "2", "--dry-run")).splitlines()
    # Issue 34: the report named the removed and the protected, and hid the newest kept.
    assert [line.split()[0] for line in report if line.endswith("kept: newest")] == [
        versions[-1], versions[-2],
    ]  # fmt: skip
    dry = await cli.json("plan", "prune", "--keep", "2", "--dry-run")
    assert dry["protected"] == {oldest: "active", second: "rollback target"}
    assert len(dry["removed"]) == 2 and await stores.plans.get_metadata(
        "default", dry["removed"][0]
    )
    pruned = await cli.json("plan", "prune", "--keep", "2")
    assert sorted(pruned["removed"]) == sorted(dry["removed"])
    left = {m.version for m in await stores.plans.list_plans("default", 100)}
    assert {oldest, second} <= left and len(left) == 4
    for gone in pruned["removed"]:
        assert await stores.plans.get_table_bytes("default", gone) is None
    (event,) = [e for e in await stores.plans.read_audit("default", 100) if e.action == "prune"]
    assert event.actor == "unverified:tester" and all(v in event.detail for v in pruned["removed"])
    # the rollback still works: its target was kept
    back = await cli.ok("plan", "rollback", *SKIP_ARGS)
    assert f"active {second}" in back
    table = await cli.ok("plan", "prune", "--keep", "1")
    assert "kept: active" in table and "kept: rollback target" in table
    assert "--keep must be >= 1" in await cli.refused("plan", "prune", "--keep", "0")
