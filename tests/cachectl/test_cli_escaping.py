"""A claimed actor cannot forge rows of ``cachectl audit`` (issue 32): a newline in an actor sent
to a real control plane printed as a second, made-up audit row. Table cells now show control and
format characters escaped; ``--json`` carries the claim exactly."""

from __future__ import annotations

import grpc

from cachectl.output import escaped
from cacheroute.v1 import admin_pb2, admin_pb2_grpc
from controlplane.server import ControlPlane
from tests.support.cli import Cli

FORGED = "alice\n2026-12-01T09:00:00Z  1h  default  ops-admin  rollout  -  p1  7  approved"


async def test_a_newline_in_a_claimed_actor_prints_escaped_on_one_row(
    plane: ControlPlane, cli: Cli
) -> None:
    async with grpc.aio.insecure_channel(plane.address) as channel:
        nodes = admin_pb2_grpc.NodeServiceStub(channel)
        request = admin_pb2.AddNodeRequest(node_id="a", address="10.0.0.1:8000", actor=FORGED)
        await nodes.AddNode(request)
    out = await cli.ok("audit")
    lines = out.strip().splitlines()
    assert len(lines) == 2, out  # the header and one event
    assert "unverified:alice\\n2026-12-01T09:00:00Z" in lines[1]
    assert "ops-admin" not in lines[0]
    (event,) = (await cli.json("audit"))["events"]
    assert event["actor"] == f"unverified:{FORGED}"


def test_control_format_and_bidi_characters_are_escaped_and_the_rest_kept() -> None:
    assert escaped("a\x00b\tc\u202ed\u2028") == "a\\x00b\\tc\\u202ed\\u2028"
    assert escaped("plain é 中 text") == "plain é 中 text"
