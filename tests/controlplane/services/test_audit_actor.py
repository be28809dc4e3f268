"""Who the audit records without ``--auth-file``: a client-named actor is only a claim."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from servekit.auth_file import token_hash
from tests.support.controlplane import clients, fast_config, running


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


@pytest.mark.grpc
async def test_without_auth_a_named_actor_is_recorded_as_unverified(
    state_url: str, stores: Stores
) -> None:
    async with running(fast_config(state_url)) as plane, clients(plane.address) as c:
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="a", address="h:1", actor="root"))
        await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="b", address="h:2"))
    first, second = await stores.plans.read_audit("default", 10)
    assert (first.action, first.actor) == ("node_add", "unverified:root")
    assert second.actor.startswith("anonymous@") and "127.0.0.1" in second.actor


@pytest.mark.grpc
async def test_with_auth_the_authenticated_name_is_recorded_whatever_the_claim(
    state_url: str, stores: Stores, tmp_path: Path
) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: ops-alice, role: write, sha256: {token_hash('w-token')}}}\n")
    config = replace(fast_config(state_url), auth_file=auth)
    token = (("authorization", "Bearer w-token"),)
    async with running(config) as plane, clients(plane.address) as c:
        request = admin_pb2.AddNodeRequest(node_id="a", address="h:1", actor="root")
        await c.nodes.AddNode(request, metadata=token)
    (event,) = await stores.plans.read_audit("default", 10)
    assert event.actor == "ops-alice"
