"""Leadership under faults: Redis killed, paused or emptied under a leader, with real redis-servers.

Each test runs its own redis-server (the session's one must not be stopped) and injects the fault
for real: ``stop`` kills the process, SIGSTOP pauses it (requests then hang until the client's
timeout), ``FLUSHALL`` stands for a Redis that restarted without persistence.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import grpc
import pytest
import redis
from grpc_health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpc_health.v1.health_pb2_grpc import HealthStub

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from controlplane.cluster.leader import SAFETY, LeaderElector
from controlplane.metrics import ControlPlaneMetrics
from controlplane.server import ControlPlane
from servekit.grpc_server import LIVENESS, READINESS
from tests.support.controlplane import clients, quick_config
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis]
SERVING = HealthCheckResponse.SERVING
NOT_SERVING = HealthCheckResponse.NOT_SERVING


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """A redis-server this test may kill, pause and restart (on the same port)."""
    server = EmbeddedRedis().start()
    try:
        yield server
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)  # never leave a paused process behind
        server.stop()


def elector(stores: Stores, name: str, ttl_s: float) -> LeaderElector:
    return LeaderElector(stores.leases, name, ttl_s=ttl_s, metrics=ControlPlaneMetrics())


def leader_gauge(e: LeaderElector) -> float | None:
    return e._metrics.registry.get_sample_value("cacheroute_controlplane_leader")


async def test_a_leader_that_loses_redis_stops_leading_at_once_and_returns_in_a_new_term(
    own_redis: EmbeddedRedis,
) -> None:
    stores = open_stores(own_redis.url)
    restarted: EmbeddedRedis | None = None
    try:
        a = elector(stores, "a", ttl_s=30.0)  # a long lease: only the failed renewal can end it
        assert await a.tick() and a.term == 1 and leader_gauge(a) == 1
        port = own_redis.port
        own_redis.stop()
        assert not await a.tick()  # the renewal fails: stop acting as leader now, not in 24 s
        assert not a.is_leader and leader_gauge(a) == 0
        assert a.term == 1
        assert not await a.tick()  # still away: still not leading, no new term
        await a.release()  # a graceful stop with Redis away does not raise
        restarted = EmbeddedRedis(port=port).start()
        assert await a.tick()
        assert a.term == 2  # a new term: the loops reload their state
        assert await stores.leases.holder("controlplane") == "a"
    finally:
        await stores.close()
        if restarted is not None:
            restarted.stop()


async def test_a_leader_on_a_paused_redis_stops_leading_within_the_safety_window(
    own_redis: EmbeddedRedis,
) -> None:
    stores = open_stores(own_redis.url)
    assert own_redis.pid is not None
    try:
        ttl = 2.0  # it must stop leading after SAFETY x ttl = 1.6 s, before Redis frees the lease
        a = elector(stores, "a", ttl_s=ttl)
        first = time.monotonic()
        assert await a.tick()
        await asyncio.sleep(0.5)  # the renewal below starts later, so it is valid for longer
        os.kill(own_redis.pid, signal.SIGSTOP)
        renewal = asyncio.create_task(a.tick())  # hangs on the paused server
        while True:  # it stops by its own clock, with the renewal still in flight
            before = time.monotonic()  # read first: a stall after it cannot fake a late answer
            if not a.is_leader:
                break
            assert before - first < ttl, "still leading after the lease TTL"
            await asyncio.sleep(0.01)
        assert time.monotonic() - first >= SAFETY * ttl  # and not before its time
        assert not renewal.done()
        os.kill(own_redis.pid, signal.SIGCONT)
        # The late renewal goes through and is still valid (it started 0.5 s after the first
        # tick), but leadership had lapsed and another instance might have led in the gap: the
        # regained leadership is a new term, so the leader's loops reload their state.
        assert await asyncio.wait_for(renewal, timeout=10)
        assert a.is_leader and a.term == 2
    finally:
        os.kill(own_redis.pid, signal.SIGCONT)
        await stores.close()


async def test_a_leader_whose_lease_vanished_and_was_taken_stops_on_its_next_renewal(
    own_redis: EmbeddedRedis,
) -> None:
    stores = open_stores(own_redis.url)
    try:
        a, b = elector(stores, "a", ttl_s=30.0), elector(stores, "b", ttl_s=30.0)
        assert await a.tick()
        client = redis.Redis.from_url(own_redis.url)
        client.flushall()  # Redis restarted without persistence: the lease is gone
        client.close()
        assert await b.tick() and b.term == 1  # another instance takes the free lease
        assert a.is_leader  # a cannot know before it renews ...
        assert not await a.tick()  # ... and then gives up at once, long before its 24 s
        assert not a.is_leader and leader_gauge(a) == 0
        assert await stores.leases.holder("controlplane") == "b"
        await a.release()  # not leading: does not touch b's lease
        assert await stores.leases.holder("controlplane") == "b"
        await b.release()
        assert await a.tick() and a.term == 2
    finally:
        await stores.close()


@pytest.mark.grpc
async def test_a_leading_instance_rides_out_a_redis_outage_and_leads_again_afterwards(
    own_redis: EmbeddedRedis,
) -> None:
    # lease 1.5 s (renewed every 0.5 s): the loads loop (every 50 ms) runs into the dead Redis
    # several times before the failed renewal ends the term
    config = quick_config(own_redis.url, leader_lease_ttl_s=1.5, instance_id="cp-f")
    plane = ControlPlane(config)
    await plane.start()
    stores = open_stores(own_redis.url)
    restarted: EmbeddedRedis | None = None
    try:
        assert plane.leader is not None
        leader = plane.leader
        registry = plane.metrics.registry
        await stores.plans.add_pool("default")

        async def published() -> bool:
            return await stores.cluster.get_load("default") is not None

        await eventually(published)
        assert leader.term == 1
        port = own_redis.port
        own_redis.stop()

        async def stopped_leading() -> bool:
            return not leader.is_leader

        await eventually(stopped_leading, timeout=10)
        errors = registry.get_sample_value("cacheroute_controlplane_loop_errors_total",
                                           {"loop": "loads"})  # fmt: skip
        assert errors is not None and errors > 0
        assert registry.get_sample_value("cacheroute_controlplane_leader") == 0
        async with clients(plane.address) as c:  # the API says so instead of hanging
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await c.plans.ListPlans(admin_pb2.ListPlansRequest(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        restarted = EmbeddedRedis(port=port).start()  # back, and empty
        await stores.plans.add_pool("default")

        async def leads_and_publishes_afresh() -> bool:
            snapshot = await stores.cluster.get_load("default")
            return leader.is_leader and snapshot is not None

        await eventually(leads_and_publishes_afresh, timeout=10)
        assert leader.term == 2
        assert await stores.leases.holder("controlplane") == "cp-f"
    finally:
        await plane.stop()
        await stores.close()
        if restarted is not None:
            restarted.stop()


async def health(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        answer = await HealthStub(channel).Check(HealthCheckRequest(service=service), timeout=5)
    return int(answer.status)


async def test_readiness_follows_the_store_while_liveness_stays_serving(
    own_redis: EmbeddedRedis,
) -> None:
    """The Kubernetes probes: readiness = this instance reaches Redis; liveness = it answers."""
    plane = ControlPlane(quick_config(own_redis.url, leader_lease_ttl_s=0.6))
    await plane.start()
    restarted: EmbeddedRedis | None = None
    try:
        address = plane.address

        async def readiness_is(status: int) -> bool:
            return await health(address, READINESS) == status

        await eventually(lambda: readiness_is(SERVING), timeout=10)
        port = own_redis.port
        own_redis.stop()
        await eventually(lambda: readiness_is(NOT_SERVING), timeout=15)
        assert await health(address, LIVENESS) == SERVING
        assert await health(address, "") == SERVING  # the admin API still answers
        restarted = EmbeddedRedis(port=port).start()
        await eventually(lambda: readiness_is(SERVING), timeout=15)
    finally:
        await plane.stop()
        if restarted is not None:
            restarted.stop()
