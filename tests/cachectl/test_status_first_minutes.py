"""What the first minutes get, before any plan (issue 34): two identical requests of one key
landed on different engines with the old default policy, and nothing said so. The default
(issue 30) now keeps a key on its ring home from the first request; ``cachectl status`` says
what a pool without a plan gets and names the flag that changes it; the claim itself is checked
on the real policies here, so the line cannot drift from what the routers do."""

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


def test_the_default_policy_keeps_one_key_before_a_plan_and_the_named_flag_spreads_it() -> None:
    default = RouterConfig.__dataclass_fields__["policy"].default
    assert default == "cacheroute_balanced"
    text = " ".join(BEFORE_THE_FIRST_PLAN)
    assert "default (cacheroute_balanced) each key stays on its hash-ring home" in text
    homes = {key: _nodes_for(default, key) for key in ("acme", "globex", "initech")}
    assert all(len(nodes) == 1 for nodes in homes.values()), homes  # affinity: what it says
    assert len({next(iter(nodes)) for nodes in homes.values()}) > 1  # keys have different homes
    assert "--policy cacheroute (the paper's dispatch) spreads it by power-of-two" in text
    assert len(_nodes_for("cacheroute", "acme")) > 1  # no affinity: what the line says


@pytest.mark.grpc
async def test_status_says_what_a_pool_without_a_plan_gets(cli: Cli) -> None:
    await cli.ok("nodes", "add", "n1", "--address", "h:1")
    status = await cli.ok("status")
    assert "pool default: no active plan" in status
    for line in BEFORE_THE_FIRST_PLAN:
        assert f"  {line}\n" in status
