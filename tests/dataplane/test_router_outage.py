"""Redis goes away: routing goes on from what the router holds; it converges when Redis is back."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from cacheroute_state.urls import redacted
from dataplane.core.keys import hash_key
from servekit.grpc_server import LIVENESS, READINESS
from tests.support.factories import small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    ack_of,
    load_snapshot,
    rollout,
    running_router,
    scrape,
    warm_keys,
)

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow]


async def test_routing_survives_a_redis_outage_and_converges_after_it(tmp_path: object) -> None:
    redis = EmbeddedRedis().start()
    port = redis.port
    stores = open_stores(redis.url)
    restarted: EmbeddedRedis | None = None
    try:
        t1, t2, t3 = (small_plan(seed=s) for s in (1, 2, 3))
        for table in (t1, t2):
            await rollout(stores, await store_plan(stores, table))  # t2 at generation 2
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
        fast = {"table_interval_s": 0.2, "load_interval_s": 0.2, "ack_interval_s": 0.2,
                "report_interval_s": 0.2, "sample_interval_s": 0.2, "sample_rate": 1.0}  # fmt: skip
        async with (
            running_router(redis.url, **fast) as server,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            key = warm_keys(t2)[0]
            before = await stub.Route(routing_pb2.RouteRequest(key=key))
            assert (before.version, before.generation) == (t2.version, 2)

            redis.stop()  # no persistence: it comes back empty
            for _ in range(20):
                decision = await asyncio.wait_for(
                    stub.Route(routing_pb2.RouteRequest(key=key)), timeout=0.5
                )
                assert (decision.version, decision.generation) == (t2.version, 2)
                assert decision.node_id in (t2.destination_ids(hash_key(key)) or [])
                await asyncio.sleep(0.05)  # ~1 s without Redis: ticks, ACKs and reports fail
            metrics = scrape(server)
            ack_errors = next(
                row for row in metrics.splitlines()
                if row.startswith("cacheroute_router_ack_write_errors_total ")
            )  # fmt: skip
            assert float(ack_errors.split()[-1]) > 0  # heartbeats failed quietly
            assert 'cacheroute_router_reports_dropped_total{kind="traffic"}' in metrics
            assert 'cacheroute_router_table_updates_total{pool="default",result="error"}' in metrics

            restarted = EmbeddedRedis(port=port).start()
            # The new Redis holds nothing: a new rollout starts again at generation 1, which
            # the router follows although it is lower than the generation it serves.
            generation = await rollout(stores, await store_plan(stores, t3))
            assert generation == 1
            await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 1.0), seq=1))
            key3 = warm_keys(t3)[0]

            async def converged() -> bool:
                reply = await stub.Route(routing_pb2.RouteRequest(key=key3))
                ack = await ack_of(stores)
                return bool(
                    reply.version == t3.version
                    and ack is not None
                    and (ack.version, ack.accepted) == (t3.version, True)
                )

            await eventually(converged, timeout=15.0)

            async def reporting() -> bool:
                _, reports = await stores.telemetry.read_traffic("default", "0")
                samples = await stores.telemetry.read_samples("default", 10)
                return bool(reports) and bool(samples)

            await eventually(reporting, timeout=5.0)
    finally:
        await stores.close()
        redis.stop()
        if restarted is not None:
            restarted.stop()


async def health_of(channel: grpc.aio.Channel, service: str = "cacheroute.v1.RouterService") -> int:
    answer = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=5
    )
    return int(answer.status)


async def test_a_router_started_without_redis_serves_unavailable_then_catches_up() -> None:
    redis = EmbeddedRedis()  # port chosen, not started yet
    stores = open_stores(redis.url)
    try:
        async with (
            running_router(
                redis.url, startup_timeout_s=0.5, table_interval_s=0.2, load_interval_s=0.2
            ) as server,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            assert await health_of(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
            # The Kubernetes probes: not ready (unsynced), but alive (no restart would help).
            assert await health_of(channel, READINESS) == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await health_of(channel, LIVENESS) == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Route(routing_pb2.RouteRequest(key="key-1"))
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "has no destinations yet" in str(raised.value.details())
            assert f"not synced with Redis at {redis.url}" in str(raised.value.details())
            redis.start()
            table = small_plan(seed=5)
            await rollout(stores, await store_plan(stores, table))
            await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

            async def serving() -> bool:
                try:
                    reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
                except grpc.aio.AioRpcError:
                    return False
                return bool(reply.version == table.version)

            await eventually(serving, timeout=15.0)

            async def healthy() -> bool:
                return await health_of(channel) == health_pb2.HealthCheckResponse.SERVING

            await eventually(healthy, timeout=5.0)
            assert await health_of(channel, READINESS) == health_pb2.HealthCheckResponse.SERVING
            redis.stop()  # an outage after the first sync: it keeps serving what it holds
            await asyncio.sleep(0.5)
            assert await health_of(channel) == health_pb2.HealthCheckResponse.SERVING
            reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
            assert reply.version == table.version
    finally:
        await stores.close()
        redis.stop()


def test_a_store_url_is_shown_without_its_password() -> None:
    assert redacted("redis://:s3cret@10.0.0.1:6380/2") == "redis://:***@10.0.0.1:6380/2"
    assert redacted("rediss://app:pw@[::1]:6379/0") == "rediss://app:***@[::1]:6379/0"
    assert redacted("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
