"""Leader failover with the agents pinned to the leader: routing degrades, it never blacks out.

Real redis-server, two control planes, four simulated engines, one agents process pointed at the
first control plane only, one router; all subprocesses on 127.0.0.1. The leader is SIGKILLed: the
agents cannot reach anyone, so the new leader keeps their nodes up for its grace period and then
marks them down; the router's panic threshold then routes over every undrained node. Before
issue 9 the new leader published every node down at once and ~87% of Route calls failed
UNAVAILABLE until the end of the run. Then the killed instance comes back on its port: the
agents rejoin and every node is healthy again within a bound.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cacheroute_state.embedded import EmbeddedRedis
from tests.support.faults import Fleet, Proc, RouteProbe, list_nodes, until
from tests.support.timing import LagMeter

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(180)]  # fmt: skip

CP_FLAGS = ("--leader-lease-ttl", "1", "--load-publish-interval", "0.25",
            "--node-timeout-intervals", "3", "--leader-grace", "4")  # fmt: skip
RECOVERY_BOUND_S = 15.0  # agents' backoff tops out at 5 s; a stream then joins at once


@dataclass
class TwoControlPlanes:
    """cp-1 (the leader) and cp-2, four engines with their agents, and a probe on the router."""

    cp1: Proc
    cp2: Proc
    address1: str
    address2: str
    agents: Proc
    probe: RouteProbe


async def four_healthy(address: str) -> bool:
    statuses = await list_nodes(address)
    return len(statuses) == 4 and all(s.load.healthy for s in statuses)


async def two_control_planes_routing(
    fleet: Fleet, redis: EmbeddedRedis, *, both_to_agents: bool
) -> TwoControlPlanes:
    """Start the fleet and return once the router routes over all four healthy nodes; the
    agents get cp-1's address only (pinned) or both, the leader's first."""
    cp1 = fleet.controlplane("cp-1", redis.url, *CP_FLAGS)
    address1 = (await cp1.logged("control plane serving", "listen"))[0]
    await cp1.logged("became leader", "instance")
    cp2 = fleet.controlplane("cp-2", redis.url, *CP_FLAGS)
    address2 = (await cp2.logged("control plane serving", "listen"))[0]
    engines = fleet.engines("engines", 4)
    urls = await engines.logged("engine serving", "url", 4)
    nodes = {f"sim-{i}": url for i, url in enumerate(urls)}
    targets = f"{address1},{address2}" if both_to_agents else address1
    agents = fleet.agents("agents", targets, nodes)
    router = fleet.router("router", redis.url)
    router_address = (await router.logged("router serving", "address"))[0]
    await until(lambda: four_healthy(address2), 30, "four healthy nodes")
    probe = RouteProbe(router_address).start()

    async def routes_everywhere() -> bool:  # the router has applied a snapshot of all four
        return len({o for _, o in probe.outcomes[-200:] if not o.startswith("error")}) == 4

    await until(routes_everywhere, 20, "the router routes over all four nodes")
    return TwoControlPlanes(cp1, cp2, address1, address2, agents, probe)


async def test_killing_the_leader_with_agents_pinned_to_it_fails_no_route_call(
    tmp_path: Path, lag: LagMeter
) -> None:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path / "logs")
    try:
        run = await two_control_planes_routing(fleet, redis, both_to_agents=False)
        cp1, cp2, address1, address2, probe = (
            run.cp1,
            run.cp2,
            run.address1,
            run.address2,
            run.probe,
        )

        async def all_healthy() -> bool:
            return await four_healthy(address2)

        cp1.signal(signal.SIGKILL)
        killed_at = time.time()
        await cp2.logged("became leader", "instance", timeout=10)

        async def graced() -> bool:  # listed as routers treat them, with the reason
            statuses = await list_nodes(address2)
            return all(not s.down and s.reason.startswith("leader grace") for s in statuses)

        await until(graced, 4, "ListNodes shows the nodes kept up by the leader's grace")

        async def all_down() -> bool:
            return all(s.down for s in await list_nodes(address2))

        await until(all_down, 20, "the new leader marks the silent nodes down after its grace")
        await asyncio.sleep(3.0)  # the router has applied the all-down snapshots by now

        async def probed_since_the_kill() -> bool:  # enough calls to see the spread
            return len([t for t, _ in probe.outcomes if t >= killed_at]) > 200

        await until(probed_since_the_kill, 60, "200 probe calls since the kill")
        during = [o for t, o in probe.outcomes if t >= killed_at]
        assert probe.failures(since=killed_at) == []  # panic threshold: degraded, not dark
        assert len({o for o in during[-100:]}) == 4  # spread over every undrained node

        port = address1.rpartition(":")[2]
        fleet.controlplane("cp-1b", redis.url, *CP_FLAGS, port=int(port))
        back = await until(
            all_healthy, RECOVERY_BOUND_S, "nodes healthy after cp-1 returns", lag=lag
        )
        await probe.stop()
        assert probe.failures(since=killed_at) == []
        assert back <= RECOVERY_BOUND_S  # claimed by until(lag=...) above
    finally:
        fleet.stop()
        redis.stop()


async def test_agents_given_every_address_follow_to_the_survivor_and_no_node_goes_down(
    tmp_path: Path,
) -> None:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path / "logs")
    try:
        run = await two_control_planes_routing(fleet, redis, both_to_agents=True)
        cp1, address2, probe, agents = run.cp1, run.address2, run.probe, run.agents
        cp1.signal(signal.SIGKILL)
        killed_at = time.time()
        worst = 4
        while time.time() < killed_at + 8.0:  # takeover (~1.3 s) + the grace (4 s) + margin
            statuses = await list_nodes(address2)
            worst = min(worst, sum(1 for s in statuses if s.load.healthy))
            await asyncio.sleep(0.1)
        await probe.stop()
        assert worst == 4  # the agents moved to cp-2 within the new leader's grace
        assert probe.failures(since=killed_at) == []
        rejoined = [e for e in agents.events("controlplane_stream_lost")]
        assert len(rejoined) >= 4  # each agent noticed the loss and moved on
    finally:
        fleet.stop()
        redis.stop()
