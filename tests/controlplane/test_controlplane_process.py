"""``python -m controlplane`` as a real process: embedded Redis, SIGTERM, failover, restart."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute.v1 import admin_pb2, admin_pb2_grpc
from cacheroute_state import open_stores
from controlplane.core.rates import RateEstimator
from dataplane.core.table_codec import table_to_proto
from dataplane.server import RouterConfig, RouterServer
from servekit.processes import free_port
from tests.support.controlplane import SKIP_ALL, ControlPlaneProcess, traffic
from tests.support.factories import small_plan
from tests.support.timing import LagMeter

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow]


def status_of(address: str) -> admin_pb2.ClusterStatus:
    with grpc.insecure_channel(address) as channel:
        return admin_pb2_grpc.PlanServiceStub(channel).GetStatus(
            admin_pb2.GetStatusRequest(), timeout=5
        )


def test_embedded_redis_health_and_sigterm_exit(processes: list[ControlPlaneProcess]) -> None:
    plane = ControlPlaneProcess()
    processes.append(plane)
    embedded = plane.wait_for("started embedded redis")
    assert embedded["redis_url"] == plane.redis_url and embedded["service"] == "controlplane"
    with grpc.insecure_channel(plane.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "cacheroute.v1.PlanService", "cacheroute.v1.AgentService"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    plane.wait_for("became leader")
    assert plane.terminate() == 0
    plane.wait_for("released leadership")
    plane.wait_for("control plane stopped")
    with pytest.raises(redis.ConnectionError):  # the embedded server went with it
        redis.Redis.from_url(plane.redis_url, socket_connect_timeout=0.5).ping()


def test_killed_leader_is_replaced_by_the_other_instance(
    redis_url: str, processes: list[ControlPlaneProcess], lag: LagMeter
) -> None:
    common = ("--redis-url", redis_url, "--leader-lease-ttl", "1")
    a = ControlPlaneProcess(*common, "--instance-id", "cp-a")
    processes.append(a)
    a.wait_for("became leader")
    b = ControlPlaneProcess(*common, "--instance-id", "cp-b")
    processes.append(b)
    assert status_of(b.address).leader_id == "cp-a"
    a.kill()  # no release: b must wait for the lease to expire
    killed = time.monotonic()
    b.wait_for("became leader", timeout=30)
    took = time.monotonic() - killed
    lag.claim(took < 3.0, f"takeover in {took:.2f} s, within the TTL 1 s + a renewal + slack")
    status = status_of(b.address)
    assert status.leader_id == "cp-b" and status.is_leader
    assert b.terminate() == 0


def reports_in(state: bytes) -> int:
    """How many traffic reports a saved rate state has consumed."""
    return RateEstimator.from_bytes(state, 60.0, max_keys=100).reports


async def test_restart_keeps_plans_pointer_and_rate_state(
    tmp_path: Path, processes: list[ControlPlaneProcess]
) -> None:
    data_dir = tmp_path / "redis"
    first = ControlPlaneProcess("--redis-data-dir", str(data_dir))
    processes.append(first)
    table = small_plan(seed=5)
    with grpc.insecure_channel(first.address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table_to_proto(table)), timeout=5)
        nodes = admin_pb2_grpc.NodeServiceStub(channel)
        for i, node in enumerate(table.node_ids):
            request = admin_pb2.AddNodeRequest(node_id=node, address=f"127.0.0.1:{9000 + i}")
            nodes.AddNode(request, timeout=5)
        plans.Rollout(
            admin_pb2.RolloutRequest(version=table.version, actor="alice", **SKIP_ALL), timeout=5
        )
    stores = open_stores(first.redis_url)
    try:
        for window in range(3):
            await stores.telemetry.add_traffic(traffic("r1", window, {"hot": 50}, total=100))
        # The state is saved as reports are consumed: wait for the save that has all three (a
        # save after the first report alone, compared below, was a race the restart could lose).
        deadline = time.monotonic() + 10
        while True:
            saved = await stores.telemetry.load_rates("default")
            if saved is not None and reports_in(saved) == 3:
                break
            assert time.monotonic() < deadline, f"rate state never had the 3 reports: {saved!r}"
            await asyncio.sleep(0.05)
    finally:
        await stores.close()
    assert first.terminate() == 0

    second = ControlPlaneProcess("--redis-data-dir", str(data_dir))
    processes.append(second)
    assert any(data_dir.iterdir())  # the AOF (a file or a folder, by Redis version)
    with grpc.insecure_channel(second.address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        listed = plans.ListPlans(admin_pb2.ListPlansRequest(), timeout=5)
        assert [p.metadata.version for p in listed.plans] == [table.version]
        assert (listed.active.version, listed.active.generation) == (table.version, 1)
        nodes = admin_pb2_grpc.NodeServiceStub(channel)
        nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n1", address="h:1"), timeout=5)
        built = plans.BuildPlan(admin_pb2.BuildPlanRequest(), timeout=5)  # from the kept rates
        assert built.metadata.stats.total_rate == pytest.approx(10, rel=1e-3)
    stores = open_stores(second.redis_url)
    try:
        assert await stores.telemetry.load_rates("default") == saved
    finally:
        await stores.close()
    assert second.terminate() == 0


async def test_a_restart_with_the_embedded_redis_keeps_routers_synced(
    tmp_path: Path, processes: list[ControlPlaneProcess]
) -> None:
    """The embedded Redis comes back on its fixed port with its data, so a router started
    against it (as the README says) follows rollouts made after the control plane restarted."""
    port = free_port()
    args = ("--embedded-redis-port", str(port), "--redis-data-dir", str(tmp_path / "redis"))
    first = ControlPlaneProcess(*args)
    processes.append(first)
    assert first.redis_url == f"redis://127.0.0.1:{port}/0"
    one, two = small_plan(seed=1), small_plan(seed=2)
    with grpc.insecure_channel(first.address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        nodes = admin_pb2_grpc.NodeServiceStub(channel)
        for i, node in enumerate(one.node_ids):
            request = admin_pb2.AddNodeRequest(node_id=node, address=f"127.0.0.1:{9000 + i}")
            nodes.AddNode(request, timeout=5)
        for table in (one, two):
            plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table_to_proto(table)), timeout=5)
        plans.Rollout(admin_pb2.RolloutRequest(version=one.version, **SKIP_ALL), timeout=5)
    config = RouterConfig(
        listen="127.0.0.1:0", redis_url=first.redis_url, router_id="r1", table_interval_s=0.2,
        load_interval_s=0.2, ack_interval_s=0.5, grace_s=0.5, metrics_listen=None,
    )  # fmt: skip
    router = RouterServer(config)
    await router.start()
    try:
        await until_acked(first.address, "r1", 1)
        await asyncio.sleep(1.2)  # the AOF is fsynced every second
        assert first.terminate() == 0
        second = ControlPlaneProcess(*args)
        processes.append(second)
        assert second.redis_url == first.redis_url
        with grpc.insecure_channel(second.address) as channel:
            plans = admin_pb2_grpc.PlanServiceStub(channel)
            pointer = plans.Rollout(
                admin_pb2.RolloutRequest(version=two.version, **SKIP_ALL), timeout=5
            )
            assert pointer.generation == 2  # the store kept generation 1
        await until_acked(second.address, "r1", 2)
        status = status_of(second.address)
        assert f"redis://127.0.0.1:{port}/0 (embedded, supervised, AOF in" in status.store
        assert second.terminate() == 0
    finally:
        await router.stop()


async def test_the_embedded_redis_is_restarted_when_it_dies(
    tmp_path: Path, processes: list[ControlPlaneProcess]
) -> None:
    plane = ControlPlaneProcess("--redis-data-dir", str(tmp_path / "redis"))
    processes.append(plane)
    started = plane.wait_for("started embedded redis")
    table = small_plan(seed=3)
    with grpc.insecure_channel(plane.address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        plans.ImportPlan(admin_pb2.ImportPlanRequest(table=table_to_proto(table)), timeout=5)
    await asyncio.sleep(1.2)  # fsynced
    os.kill(started["pid"], signal.SIGKILL)
    plane.wait_for("embedded redis exited; restarting it")
    restarted = plane.wait_for("embedded redis restarted")
    assert restarted["pid"] != started["pid"] and restarted["redis_url"] == plane.redis_url
    with grpc.insecure_channel(plane.address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        listed = plans.ListPlans(admin_pb2.ListPlansRequest(), timeout=5)
        assert [p.metadata.version for p in listed.plans] == [table.version]
    assert plane.terminate() == 0


async def until_acked(address: str, router_id: str, generation: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            acks = {a.router_id: a for p in status_of(address).pools for a in p.routers}
        except grpc.RpcError:
            acks = {}
        ack = acks.get(router_id)
        if ack is not None and ack.accepted and ack.generation == generation:
            return
        assert time.monotonic() < deadline, f"{router_id} never ACKed generation {generation}"
        await asyncio.sleep(0.1)
