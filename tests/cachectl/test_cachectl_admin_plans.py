"""cachectl ``plan`` against a real control plane: import, build, shadow, rollout, prune."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from cacheroute.v1 import cluster_pb2, table_pb2
from cacheroute_state import Stores
from dataplane.core.table_codec import encode_table
from sim.planning import make_stream, plan_for
from sim.workloads.registry import make_workload
from tests.support.admin_cli import add_plan_nodes, stores, write_plan
from tests.support.cli import Cli, run_main
from tests.support.controlplane import SKIP_ARGS, traffic
from tests.support.state import on_redis

__all__ = ["stores"]  # the fixture

pytestmark = pytest.mark.grpc


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
