"""Redis Sentinel for real: a primary, a replica and three sentinels from the same redis-server
binary; a control plane and a router on a ``redis+sentinel://`` URL; the primary is SIGKILLed
under Route load.

Claims: zero failed Route calls; plans, pointer and audit intact after the failover; the control
plane publishes snapshots and the router writes ACKs on the new primary within a bound.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis as redis_py

from cacheroute.v1 import admin_pb2, admin_pb2_grpc
from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis, find_redis_server
from cacheroute_state.redis_base import parse_sentinel_url
from servekit.processes import free_port
from tests.support.factories import small_plan, store_plan
from tests.support.faults import Fleet, RouteProbe, until
from tests.support.router import rollout
from tests.support.timing import LagMeter

# The timeout is a hang guard, not a bound: a busy machine stretches the waits.
pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(480)]  # fmt: skip

SERVICE = "cacheroute"
CONVERGE_BOUND_S = 20.0  # sentinel notices in 1 s, elects and promotes in a few more


def test_sentinel_urls_parse_with_every_part() -> None:
    parsed = parse_sentinel_url("redis+sentinel://:pw@a:1,[::1]:2/svc/3?sentinel_password=sp")
    assert parsed.sentinels == (("a", 1), ("::1", 2))
    assert (parsed.service, parsed.db, parsed.password, parsed.sentinel_password) == (
        "svc", 3, "pw", "sp",
    )  # fmt: skip
    with pytest.raises(ValueError, match="SERVICE"):
        parse_sentinel_url("redis+sentinel://a:1")


class Topology:
    """A primary (EmbeddedRedis), a replica and three sentinels, all on loopback."""

    def __init__(self, tmp: Path) -> None:
        self.primary = EmbeddedRedis().start()
        self.replica_port = free_port()
        binary = find_redis_server()
        self.procs: list[subprocess.Popen[bytes]] = []
        replica_dir = tmp / "replica"
        replica_dir.mkdir()
        self.procs.append(subprocess.Popen(
            [binary, "--port", str(self.replica_port), "--bind", "127.0.0.1",
             "--protected-mode", "no", "--save", "", "--appendonly", "no",
             "--dir", str(replica_dir), "--replicaof", "127.0.0.1", str(self.primary.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        self.sentinel_ports = [free_port() for _ in range(3)]
        for n, port in enumerate(self.sentinel_ports):
            conf = tmp / f"sentinel-{n}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {tmp}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 4000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            self.procs.append(subprocess.Popen(
                [binary, str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        self.url = f"redis+sentinel://{hosts}/{SERVICE}/0"

    def master_port(self) -> int | None:
        for port in self.sentinel_ports:
            try:
                client = redis_py.Redis(port=port, socket_timeout=0.5)
                addr = client.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)
                client.close()
            except redis_py.RedisError:
                continue
            if addr:
                return int(addr[1])
        return None

    def ready(self) -> bool:
        """The replica is attached, and every sentinel knows it and the other two sentinels.

        Sentinels learn replicas from the primary's INFO (every 10 s) and each other through
        hello messages; a primary killed before that has no replica any sentinel could promote.
        """
        try:
            client = redis_py.Redis(port=self.primary.port, socket_timeout=0.5)
            info = client.info("replication")
            client.close()
            for port in self.sentinel_ports:
                sentinel = redis_py.Redis(port=port, socket_timeout=0.5)
                peers = sentinel.execute_command("SENTINEL", "sentinels", SERVICE)
                replicas = sentinel.execute_command("SENTINEL", "replicas", SERVICE)
                sentinel.close()
                if len(peers) < 2 or len(replicas) < 1:
                    return False
        except redis_py.RedisError:
            return False
        return int(info.get("connected_slaves", 0)) >= 1

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(5)
        self.primary.stop()


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[Topology]:
    topo = Topology(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not topo.ready():
            assert time.monotonic() < deadline, "sentinel topology did not come up"
            time.sleep(0.2)
        yield topo
    finally:
        topo.stop()


async def test_killing_the_primary_fails_no_route_and_everything_moves_to_the_new_one(
    topology: Topology, tmp_path: Path, lag: LagMeter
) -> None:
    stores = open_stores(topology.url)
    fleet = Fleet(tmp_path / "logs")
    try:
        table = small_plan()
        await rollout(stores, await store_plan(stores, table))
        cp = fleet.controlplane("cp", topology.url, "--leader-lease-ttl", "1",
                                "--load-publish-interval", "0.25")  # fmt: skip
        cp_address = (await cp.logged("control plane serving", "listen"))[0]
        async with grpc.aio.insecure_channel(cp_address) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            for node in table.node_ids:
                await nodes.AddNode(admin_pb2.AddNodeRequest(node_id=node, address=f"{node}:1"))
        router = fleet.router("router", topology.url)
        address = (await router.logged("router serving", "address"))[0]
        await router.logged("table applied", "version")

        async def snapshot_seq() -> int:
            snap = await stores.cluster.get_load("default")
            return snap.seq if snap is not None else 0

        await until(lambda: _positive(snapshot_seq()), 15, "snapshots flow")
        probe = RouteProbe(address).start()
        await until(lambda: _true(len(probe.outcomes) > 50), 10, "routes flow")
        raw = redis_py.Redis(port=topology.primary.port)
        assert raw.execute_command("WAIT", 1, 2000) >= 1  # the replica has every write
        raw.close()
        old_port = topology.primary.port
        assert topology.primary._process is not None
        topology.primary._process.send_signal(signal.SIGKILL)
        killed_at = time.time()

        async def promoted() -> bool:
            port = topology.master_port()
            return port is not None and port != old_port

        await until(promoted, CONVERGE_BOUND_S, "sentinel promotes the replica", lag=lag)
        seq_after_failover = await snapshot_seq()

        async def publishing_again() -> bool:
            return await snapshot_seq() > seq_after_failover + 4

        async def router_acked_again() -> bool:
            acks = await stores.cluster.get_acks("default")
            return any(a.router_id == "router" and a.at_unix_ms > killed_at * 1000 for a in acks)

        took = await until(
            publishing_again, CONVERGE_BOUND_S, "the control plane publishes", lag=lag
        )
        await until(
            router_acked_again, CONVERGE_BOUND_S, "the router ACKs on the new primary", lag=lag
        )

        async def probed_after_the_kill() -> bool:  # enough Route calls to mean "none failed"
            return len([t for t, _ in probe.outcomes if t > killed_at]) > 100

        await until(probed_after_the_kill, 60, "100 probe calls after the kill")
        await probe.stop()
        assert probe.failures() == []
        active = await stores.plans.get_active("default")
        assert active is not None and active.version == table.version
        assert await stores.plans.get_table_bytes("default", table.version) is not None
        audit = await stores.plans.read_audit("default", 20)
        assert {e.action for e in audit} >= {"rollout", "node_add"}
        assert took <= CONVERGE_BOUND_S  # claimed by until(lag=...) above
    finally:
        fleet.stop()
        await stores.close()


async def _positive(value: object) -> bool:
    return bool(await value)  # type: ignore[misc]


async def _true(value: bool) -> bool:
    return value
