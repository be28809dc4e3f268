"""Redis Cluster mode for real: three cluster nodes from the same redis-server binary (slots
split in three), a control plane and a router on a ``redis+cluster://`` URL, two pools whose
hash-tagged keys live on different nodes. Plans roll out, snapshots flow and the router routes
both pools by their tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from redis.cluster import key_slot

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state import open_stores
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet, until
from tests.support.redis_cluster import SLOTS, RedisClusterProcs
from tests.support.router import rollout, warm_keys

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(180)]  # fmt: skip

POOLS = ("alpha", "default")  # slots 865 and 5718: the first and the second node


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    procs = RedisClusterProcs(tmp_path / "cluster")
    try:
        procs.form()
        yield procs.url(procs.primary_ports[:2])
    finally:
        procs.stop()


def test_the_two_pools_live_on_different_cluster_nodes() -> None:
    slots = [key_slot(f"cr:{{{pool}}}:active".encode()) for pool in POOLS]
    owners = [next(i for i, (lo, hi) in enumerate(SLOTS) if lo <= s <= hi) for s in slots]
    assert owners[0] != owners[1]


async def test_plans_snapshots_and_routing_work_on_a_three_node_cluster(
    cluster: str, tmp_path: Path
) -> None:
    stores = open_stores(cluster)
    fleet = Fleet(tmp_path / "logs")
    try:
        tables = {pool: small_plan(pool=pool, seed=i) for i, pool in enumerate(POOLS)}
        for pool, table in tables.items():
            await rollout(stores, await store_plan(stores, table), pool=pool)
        cp = fleet.controlplane("cp", cluster, "--load-publish-interval", "0.25")
        cp_address = (await cp.logged("control plane serving", "listen"))[0]
        async with grpc.aio.insecure_channel(cp_address) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            for pool, table in tables.items():
                for node in table.node_ids:
                    request = admin_pb2.AddNodeRequest(pool=pool, node_id=node, address=f"{node}:1")
                    await nodes.AddNode(request)
        router = fleet.router("router", cluster)
        address = (await router.logged("router serving", "address"))[0]

        async def acked_everywhere() -> bool:
            for pool, table in tables.items():
                acks = await stores.cluster.get_acks(pool)
                if not any(a.router_id == "router" and a.accepted and a.version == table.version
                           for a in acks):  # fmt: skip
                    return False
            return True

        await until(acked_everywhere, 20, "the router ACKs both pools' plans")
        async with grpc.aio.insecure_channel(address) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            for pool, table in tables.items():
                key = warm_keys(table)[0]

                async def routed(pool: str = pool, key: str = key) -> bool:
                    answer = await stub.Route(routing_pb2.RouteRequest(pool=pool, key=key))
                    return answer.reason == routing_pb2.ROUTE_REASON_WARM

                await until(routed, 20, f"pool {pool} routes by its table")
        for pool in POOLS:
            snapshot = await stores.cluster.get_load(pool)
            assert snapshot is not None and len(snapshot.nodes) == len(tables[pool].node_ids)
        assert "Traceback" not in cp.log_path.read_text() + router.log_path.read_text()
    finally:
        fleet.stop()
        await stores.close()
