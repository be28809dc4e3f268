"""Authentication and roles, end to end: a control-plane subprocess run with ``--auth-file``,
``cachectl`` subprocesses with and without tokens, an agents subprocess with an agent token.

Before issue 9 an anonymous client rolled out a plan and drained every node, the audit recorded
whatever actor the client claimed, and the control plane logged the Redis URL with its password.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis as redis_py

from cacheroute.v1 import admin_pb2, admin_pb2_grpc
from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from controlplane.services.auth import token_hash
from tests.support.faults import Fleet, Proc, until

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(180)]  # fmt: skip

TOKENS = {"ops-alice": "tok-write-1f2e", "dash": "tok-read-9a8b", "rack-7": "tok-agent-77c1"}
PASSWORD = "s3cret-redis-pw"


def cachectl(
    address: str, *args: str, token: str | None = None, token_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CACHEROUTE_TOKEN"}
    if token is not None:
        env["CACHEROUTE_TOKEN"] = token
    extra = ["--token-file", str(token_file)] if token_file else []
    return subprocess.run(
        [sys.executable, "-m", "cachectl", *args, "--target", address, *extra],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Fleet, Proc, str, str]]:
    server = EmbeddedRedis().start()
    raw = redis_py.Redis.from_url(server.url)
    raw.config_set("requirepass", PASSWORD)
    raw.close()
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    auth = tmp_path / "auth.yaml"
    roles = {"ops-alice": "write", "dash": "read", "rack-7": "agent"}
    auth.write_text(
        "\n".join(
            f"- {{name: {n}, role: {roles[n]}, sha256: {token_hash(t)}}}" for n, t in TOKENS.items()
        )
    )
    fleet = Fleet(tmp_path / "logs")
    try:
        cp = fleet.controlplane("cp", url, "--auth-file", str(auth))
        address = asyncio.run(cp.logged("control plane serving", "listen"))[0]
        yield fleet, cp, address, url
    finally:
        fleet.stop()
        server.stop()


async def test_admin_calls_need_a_token_of_the_right_role_and_the_audit_names_it(
    secured: tuple[Fleet, Proc, str, str], tmp_path: Path
) -> None:
    _, cp, address, url = secured
    add = ("nodes", "add", "gpu-1", "--address", "10.0.0.1:8000")
    anonymous = cachectl(address, *add)
    assert anonymous.returncode == 2 and "UNAUTHENTICATED" in anonymous.stderr
    wrong = cachectl(address, *add, token="not-a-token")
    assert wrong.returncode == 2 and "UNAUTHENTICATED" in wrong.stderr
    reader = cachectl(address, *add, token=TOKENS["dash"])
    assert reader.returncode == 2 and "PERMISSION_DENIED" in reader.stderr
    agent = cachectl(address, *add, token=TOKENS["rack-7"])
    assert agent.returncode == 2 and "PERMISSION_DENIED" in agent.stderr

    token_file = tmp_path / "alice.token"
    token_file.write_text(TOKENS["ops-alice"] + "\n")
    written = cachectl(address, *add, "--actor", "mallory", token_file=token_file)
    assert written.returncode == 0, written.stderr
    listed = cachectl(address, "nodes", "list", "--json", token=TOKENS["dash"])
    assert listed.returncode == 0, listed.stderr
    assert "gpu-1" in listed.stdout
    drain = cachectl(address, "nodes", "drain", "gpu-1", token=TOKENS["dash"])
    assert drain.returncode == 2 and "PERMISSION_DENIED" in drain.stderr

    stores = open_stores(url)
    try:
        events = await stores.plans.read_audit("default", 10)
    finally:
        await stores.close()
    assert [(e.action, e.actor) for e in events] == [("node_add", "ops-alice")]  # not "mallory"
    log = cp.log_path.read_text()
    assert PASSWORD not in log  # the Redis URL is logged redacted
    assert all(t not in log for t in TOKENS.values())
    refusals = [json.loads(line) for line in log.splitlines() if "rpc not authorized" in line]
    assert len(refusals) == 5


async def test_agents_need_an_agent_token_and_their_nodes_are_bound_to_it(
    secured: tuple[Fleet, Proc, str, str], tmp_path: Path
) -> None:
    fleet, cp, address, _ = secured
    engines = fleet.engines("engines", 1)
    url = (await engines.logged("engine serving", "url"))[0]
    token_file = tmp_path / "agent.token"
    token_file.write_text(TOKENS["rack-7"])
    with_token = fleet.agents("agents-ok", address, {"gpu-a": url}, "--token-file", str(token_file))
    without = fleet.agents("agents-anon", address, {"gpu-b": url})
    (tmp_path / "ops.token").write_text(TOKENS["ops-alice"])
    write_role = fleet.agents(
        "agents-ops", address, {"gpu-c": url}, "--token-file", str(tmp_path / "ops.token")
    )
    token = TOKENS["dash"]

    async def registered() -> bool:
        return [s.record.node_id for s in await _nodes(address, token)] == ["gpu-a"]

    await until(registered, 20, "the agent with a token registers its node")
    nodes = await _nodes(address, token)
    assert nodes[0].record.registered_by == "rack-7"

    async def refused() -> bool:  # the anonymous agent and the one with a write token
        codes = {
            e["code"] for e in cp.events("rpc not authorized") if e["method"].endswith("Connect")
        }
        return codes == {"UNAUTHENTICATED", "PERMISSION_DENIED"}

    await until(refused, 10, "agents without an agent token are refused")
    assert [s.record.node_id for s in await _nodes(address, token)] == ["gpu-a"]
    assert with_token.running() and without.running() and write_role.running()


async def _nodes(address: str, token: str) -> list[admin_pb2.NodeStatus]:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await admin_pb2_grpc.NodeServiceStub(channel).ListNodes(
            admin_pb2.ListNodesRequest(pool="default"),
            metadata=(("authorization", f"Bearer {token}"),),
            timeout=2.0,
        )
        return list(reply.nodes)
