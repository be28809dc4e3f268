"""A real Redis Cluster on loopback from the same redis-server binary, for the system tests.

Three primaries (slots split in three) and optionally one replica each (``CLUSTER REPLICATE``),
``cluster-node-timeout`` short so a killed primary's replica is promoted within seconds. No test
here: shared by tests/system/test_cluster_mode.py and test_faults_cluster_failover.py.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import redis as redis_py
from redis.cluster import key_slot

from cacheroute_state.embedded import find_redis_server
from servekit.processes import free_port
from tests.support.timing import StartDeadline

SLOTS = ((0, 5460), (5461, 10922), (10923, 16383))
START_TIMEOUT_S = 30.0  # seconds of the machine's time (tests/support/timing.py)


def cluster_port() -> int:
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


class RedisClusterProcs:
    """Three primaries, and a replica each when ``replicas`` (module docstring)."""

    def __init__(self, tmp: Path, *, replicas: bool = False, node_timeout_ms: int = 1000) -> None:
        self.tmp = tmp
        self.binary = find_redis_server()
        self.primary_ports = [cluster_port() for _ in SLOTS]
        self.replica_ports = [cluster_port() for _ in SLOTS] if replicas else []
        self.node_timeout_ms = node_timeout_ms
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for port in self.primary_ports + self.replica_ports:
            self._start(port)

    def _start(self, port: int) -> None:
        folder = self.tmp / f"node-{port}"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "log").open("wb") as log:  # the child keeps its own copy
            self.procs[port] = subprocess.Popen(
                [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
                 "--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf"),
                 "--cluster-node-timeout", str(self.node_timeout_ms),
                 "--dir", str(folder), "--save", "", "--appendonly", "no"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def client(self, port: int) -> redis_py.Redis:
        return redis_py.Redis(host="127.0.0.1", port=port, socket_timeout=1)

    def form(self) -> None:
        """Assign slots, meet, attach replicas; returns once the cluster is ok everywhere."""
        with StartDeadline(START_TIMEOUT_S) as deadline:
            self._form(deadline)

    def _form(self, deadline: StartDeadline) -> None:
        ports = self.primary_ports + self.replica_ports
        for port in ports:
            self._wait_ping(port, deadline)
        primaries = [self.client(p) for p in self.primary_ports]
        for client, (lo, hi) in zip(primaries, SLOTS, strict=True):
            client.execute_command("CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
        for port in ports[1:]:
            with self.client(port) as client:
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", self.primary_ports[0])
        ids = [c.execute_command("CLUSTER", "MYID").decode() for c in primaries]
        for port, primary_id in zip(self.replica_ports, ids, strict=False):
            with self.client(port) as client:
                while True:  # the replica must have heard of its primary first
                    try:
                        client.execute_command("CLUSTER", "REPLICATE", primary_id)
                        break
                    except redis_py.ResponseError:
                        assert not deadline.expired(), "a replica never learned its primary"
                        time.sleep(0.1)
        while not self._ok(ports):
            assert not deadline.expired(), f"cluster did not form in {deadline.describe()}"
            time.sleep(0.1)
        for client in primaries:
            client.close()

    def _wait_ping(self, port: int, deadline: StartDeadline) -> None:
        with self.client(port) as client:
            while True:
                try:
                    client.ping()
                    return
                except redis_py.ConnectionError:
                    log = (self.tmp / f"node-{port}" / "log").read_text(errors="replace")
                    assert self.procs[port].poll() is None, f"cluster node exited: {log[-1500:]}"
                    assert not deadline.expired(), f"node did not start: {log[-500:]}"
                    time.sleep(0.05)

    def _ok(self, ports: list[int]) -> bool:
        for port in ports:
            with self.client(port) as client:
                if client.cluster("info")["cluster_state"] != "ok":
                    return False
        for port in self.primary_ports if self.replica_ports else ():
            with self.client(port) as client:
                if int(client.info("replication").get("connected_slaves", 0)) < 1:
                    return False
        return True

    def url(self, ports: list[int] | None = None) -> str:
        seeds = ports if ports is not None else self.primary_ports
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in seeds)

    def owner(self, key: str) -> int:
        """The port of the primary that serves ``key``'s slot now (asked of a live node)."""
        slot = key_slot(key.encode())
        for port, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            try:
                with self.client(port) as client:
                    for lo, hi, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                        if lo <= slot <= hi:
                            return int(primary[1])
            except redis_py.RedisError:
                continue
        raise AssertionError("no live cluster node answered CLUSTER SLOTS")

    def kill(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(5)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
