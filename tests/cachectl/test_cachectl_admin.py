"""cachectl against a real control plane: nodes, status, audit; refusals exit 2 with one line.

The plan commands (import, build, shadow, rollout, prune) are
tests/cachectl/test_cachectl_admin_plans.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from cachectl.admin_client import age_text, duration_text
from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.embedded import EmbeddedRedis
from controlplane.server import ControlPlane
from dataplane.core.table_codec import encode_table
from tests.support.admin_cli import add_plan_nodes, stores, write_plan
from tests.support.cli import ROOT, Cli, run_main
from tests.support.controlplane import fast_config, running
from tests.support.factories import metadata_for, small_plan

__all__ = ["stores"]  # the fixture

pytestmark = pytest.mark.grpc


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
