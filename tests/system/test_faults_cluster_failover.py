"""Redis Cluster failover for real: three primaries and three replicas from the same redis-server
binary, a control plane and a router on a ``redis+cluster://`` URL, Route load running; the
primary holding the default pool's slot is SIGKILLed and its replica promoted (Redis's own
failover, ``cluster-node-timeout`` 1 s).

Claims: zero failed Route calls; pointer, plans and audit intact on the promoted replica; within
``CONVERGE_BOUND_S`` of the kill the control plane publishes snapshots again, the router ACKs on
the new primary, and a plan rolled out after the failover reaches the router.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cacheroute.v1 import admin_pb2, admin_pb2_grpc
from cacheroute_state import open_stores
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet, RouteProbe, until
from tests.support.redis_cluster import RedisClusterProcs
from tests.support.router import rollout
from tests.support.timing import LagMeter

# The timeout is a hang guard, not a bound: a busy machine stretches the waits.
pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(600)]  # fmt: skip

CONVERGE_BOUND_S = 20.0  # node timeout 1 s, election ~1-2 s, clients refresh the slot map
ACTIVE_KEY = "cr:{default}:active"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterProcs]:
    procs = RedisClusterProcs(tmp_path / "cluster", replicas=True)
    try:
        procs.form()
        yield procs
    finally:
        procs.stop()


async def test_killing_a_primary_fails_no_route_and_every_component_follows_the_promotion(
    cluster: RedisClusterProcs, tmp_path: Path, lag: LagMeter
) -> None:
    url = cluster.url()
    stores = open_stores(url)
    fleet = Fleet(tmp_path / "logs")
    try:
        table = small_plan()
        await rollout(stores, await store_plan(stores, table))
        cp = fleet.controlplane("cp", url, "--leader-lease-ttl", "1",
                                "--load-publish-interval", "0.25")  # fmt: skip
        cp_address = (await cp.logged("control plane serving", "listen"))[0]
        async with grpc.aio.insecure_channel(cp_address) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            for node in table.node_ids:
                await nodes.AddNode(admin_pb2.AddNodeRequest(node_id=node, address=f"{node}:1"))
        router = fleet.router("router", url)
        address = (await router.logged("router serving", "address"))[0]
        await router.logged("table applied", "version")

        async def snapshot_seq() -> int:
            snap = await stores.cluster.get_load("default")
            return snap.seq if snap is not None else 0

        async def snapshots_flow() -> bool:
            return await snapshot_seq() > 0

        await until(snapshots_flow, 15, "snapshots flow")
        probe = RouteProbe(address).start()

        async def routes_flow() -> bool:
            return len(probe.outcomes) > 50

        await until(routes_flow, 10, "routes flow")
        victim = cluster.owner(ACTIVE_KEY)
        with cluster.client(victim) as raw:
            assert raw.execute_command("WAIT", 1, 2000) >= 1  # its replica has every write
        cluster.kill(victim)
        killed_at = time.time()

        async def promoted() -> bool:
            return cluster.owner(ACTIVE_KEY) != victim

        await until(promoted, CONVERGE_BOUND_S, "the replica is promoted", lag=lag)
        seq_after_failover = await snapshot_seq()

        async def publishing_again() -> bool:
            return await snapshot_seq() > seq_after_failover + 4

        async def router_acked_again() -> bool:
            acks = await stores.cluster.get_acks("default")
            return any(a.router_id == "router" and a.at_unix_ms > killed_at * 1000 for a in acks)

        await until(publishing_again, CONVERGE_BOUND_S, "the control plane publishes", lag=lag)
        await until(
            router_acked_again, CONVERGE_BOUND_S, "the router ACKs on the new primary", lag=lag
        )
        newer = small_plan(seed=7)
        await rollout(stores, await store_plan(stores, newer))

        async def router_has_the_new_plan() -> bool:
            acks = await stores.cluster.get_acks("default")
            return any(a.router_id == "router" and a.accepted and a.version == newer.version
                       for a in acks)  # fmt: skip

        await until(
            router_has_the_new_plan, CONVERGE_BOUND_S, "a rollout reaches the router", lag=lag
        )
        converged = time.time() - killed_at

        async def probed_after_the_kill() -> bool:  # enough Route calls to mean "none failed"
            return len([t for t, _ in probe.outcomes if t > killed_at]) > 100

        await until(probed_after_the_kill, 60, "100 probe calls after the kill")
        await probe.stop()
        assert probe.failures() == []
        active = await stores.plans.get_active("default")
        assert active is not None and active.version == newer.version
        for version in (table.version, newer.version):
            assert await stores.plans.get_table_bytes("default", version) is not None
        audit = await stores.plans.read_audit("default", 50)
        assert [e.action for e in audit].count("rollout") >= 2
        assert {e.action for e in audit} >= {"rollout", "node_add"}
        lag.claim(converged < 2 * CONVERGE_BOUND_S, f"converged in {converged:.1f} s")
    finally:
        fleet.stop()
        await stores.close()
