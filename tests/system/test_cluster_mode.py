"""Redis Cluster mode for real: three cluster nodes from the same redis-server binary (slots
split in three), a control plane and a router on a ``redis+cluster://`` URL, two pools whose
hash-tagged keys live on different nodes. Plans roll out, snapshots flow and the router routes
both pools by their tables."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis as redis_py
from redis.cluster import key_slot

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state import open_stores
from cacheroute_state.embedded import find_redis_server
from servekit.processes import free_port
from tests.dataplane.test_router_service import rollout, store_plan, warm_keys
from tests.support.factories import small_plan
from tests.support.faults import Fleet, until

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(180)]  # fmt: skip

SLOTS = ((0, 5460), (5461, 10922), (10923, 16383))
POOLS = ("alpha", "default")  # slots 865 and 5718: the first and the second node


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    binary = find_redis_server()
    ports = [_cluster_port() for _ in SLOTS]
    procs = []
    for port in ports:
        folder = tmp_path / f"node-{port}"
        folder.mkdir()
        procs.append(subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
             "--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf"),
             "--dir", str(folder), "--save", "", "--appendonly", "no"],
            stdout=(folder / "log").open("wb"), stderr=subprocess.STDOUT,
        ))  # fmt: skip
    try:
        clients = [redis_py.Redis(host="127.0.0.1", port=p, socket_timeout=1) for p in ports]
        deadline = time.monotonic() + 20
        for client, proc, port in zip(clients, procs, ports, strict=True):
            while True:
                try:
                    client.ping()
                    break
                except redis_py.ConnectionError:
                    log = (tmp_path / f"node-{port}" / "log").read_text(errors="replace")
                    assert proc.poll() is None, f"cluster node exited: {log[-1500:]}"
                    assert time.monotonic() < deadline, f"cluster node did not start: {log[-500:]}"
                    time.sleep(0.05)
        for client, (lo, hi) in zip(clients, SLOTS, strict=True):
            client.execute_command("CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
        while not all(c.cluster("info")["cluster_state"] == "ok" for c in clients):
            assert time.monotonic() < deadline, "cluster did not form"
            time.sleep(0.1)
        for client in clients:
            client.close()
        yield f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(5)


def _cluster_port() -> int:
    """A free port whose cluster-bus port (+10,000, Redis 6) is free and valid too."""
    while True:
        port = free_port()
        if port <= 55_000 and _free(port + 10_000):
            return port


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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
