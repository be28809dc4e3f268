"""What the first minutes get, before any plan (issue 34): two identical requests of one key
landed on different engines with the default policy, and nothing said so. ``cachectl status``
now says it and names the flag that changes it; the claim itself is checked on the real
policies here, so the line cannot drift from what the routers do."""

from __future__ import annotations

import pytest

from cachectl.status_cmd import BEFORE_THE_FIRST_PLAN
from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies import Request, make_policy
from dataplane.server import RouterConfig
from tests.support.cli import Cli

NODES = NodeSet([f"node-{i}" for i in range(8)])


def _nodes_for(policy: str, key: str, times: int = 12) -> set[int]:
    chooser = make_policy(policy, seed=1)
    view = LoadView(NODES)  # no table: the first minutes
    return {chooser.choose(Request(hash_key(key), ()), view).node for _ in range(times)}


def test_the_default_policy_spreads_one_key_before_a_plan_and_the_named_flag_keeps_it() -> None:
    assert RouterConfig.__dataclass_fields__["policy"].default == "cacheroute"
    text = " ".join(BEFORE_THE_FIRST_PLAN)
    assert "default (cacheroute) power-of-two choices" in text
    assert len(_nodes_for("cacheroute", "acme")) > 1  # no affinity: what the line says
    assert "--policy cacheroute_online keeps each key on its hash-ring home" in text
    homes = {key: _nodes_for("cacheroute_online", key) for key in ("acme", "globex", "initech")}
    assert all(len(nodes) == 1 for nodes in homes.values()), homes


@pytest.mark.grpc
async def test_status_says_what_a_pool_without_a_plan_gets(cli: Cli) -> None:
    await cli.ok("nodes", "add", "n1", "--address", "h:1")
    status = await cli.ok("status")
    assert "pool default: no active plan" in status
    for line in BEFORE_THE_FIRST_PLAN:
        assert f"  {line}\n" in status
