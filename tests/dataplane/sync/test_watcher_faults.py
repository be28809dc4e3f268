"""A router's watchers against bad state in a real Redis: malformed and wrong-pool load hints,
table bytes that went missing or belong to another pool or version, malformed pool names.

The router must keep serving what it holds, say what it refused (metrics, NACK reasons) and
converge by itself once the state is good again.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import redis

from cacheroute.v1 import cluster_pb2, routing_pb2
from cacheroute_state import Stores, schema
from dataplane.core.table_codec import encode_table
from dataplane.server import RouterServer
from tests.support.factories import small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    ack_of,
    load_snapshot,
    rollout,
    router_stub,
    running_router,
    warm_keys,
)

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
# stop at once: no RPC in flight at the end, no HTTP endpoint to close (the registry is read)
QUICK = {"grace_s": 0.05, "metrics_listen": None}


def counted(server: RouterServer, name: str, pool: str, result: str) -> float:
    value = server.metrics.registry.get_sample_value(name, {"pool": pool, "result": result})
    return value or 0.0


def load_updates(server: RouterServer, result: str, pool: str = "default") -> float:
    return counted(server, "cacheroute_router_load_updates_total", pool, result)


def loads_seen(server: RouterServer, pool: str = "default") -> dict[str, float]:
    view = server.router.pools[pool].view
    return dict(zip(view.nodes.ids, view.loads, strict=True))


def publish_raw(redis_url: str, channel: str, payload: bytes) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.publish(channel, payload)
    finally:
        client.close()


def later(snapshot: cluster_pb2.LoadSnapshot, ms: int) -> cluster_pb2.LoadSnapshot:
    snapshot.observed_at_unix_ms += ms
    return snapshot


# -- load hints ---------------------------------------------------------------------------------


async def test_malformed_and_wrong_pool_load_hints_are_refused_and_the_last_loads_kept(
    redis_url: str, stores: Stores
) -> None:
    await rollout(stores, await store_plan(stores, small_plan(seed=1)))
    good = load_snapshot(dict.fromkeys(NODES, 5.0), seq=1)
    await stores.cluster.publish_load(good)
    async with running_router(redis_url, **QUICK) as server:
        await asyncio.wait_for(server.hints_connected.wait(), 5)

        async def applied(count: float) -> bool:
            return load_updates(server, "applied") >= count

        await eventually(lambda: applied(1))
        channel = schema.load_channel("default")
        other_pool = later(load_snapshot(dict.fromkeys(NODES, 0.0), seq=2, pool="other"), 10)
        duplicate = later(load_snapshot({"node-0": 0.0}, seq=3), 20)
        duplicate.nodes.append(duplicate.nodes[0])
        not_finite = later(
            load_snapshot({**dict.fromkeys(NODES, 0.0), "node-1": math.nan}, seq=4), 30
        )
        negative = later(load_snapshot({**dict.fromkeys(NODES, 0.0), "node-2": -50.0}, seq=5), 40)
        bad_hints = [
            b"\xff\xff\xff not a LoadSnapshot",
            other_pool.SerializeToString(),
            duplicate.SerializeToString(),
            not_finite.SerializeToString(),
            negative.SerializeToString(),
        ]
        for payload in bad_hints:
            publish_raw(redis_url, channel, payload)

        async def all_refused() -> bool:
            return load_updates(server, "rejected") >= len(bad_hints)

        await eventually(all_refused)
        assert load_updates(server, "rejected") == len(bad_hints)
        assert loads_seen(server) == dict.fromkeys(NODES, 5.0)  # still the last good snapshot
        assert load_updates(server, "applied") == 1

        await stores.cluster.publish_load(  # a good, newer snapshot is applied as usual
            later(load_snapshot({**dict.fromkeys(NODES, 7.0), "node-3": 1.0}, seq=6), 50)
        )
        await eventually(lambda: applied(2))
        assert loads_seen(server)["node-3"] == 1.0


async def test_an_older_or_repeated_load_hint_is_counted_stale_and_ignored(
    redis_url: str, stores: Stores
) -> None:
    await rollout(stores, await store_plan(stores, small_plan(seed=1)))
    newer = load_snapshot(dict.fromkeys(NODES, 9.0), seq=7)
    older = load_snapshot(dict.fromkeys(NODES, 0.0), seq=6)
    older.observed_at_unix_ms = newer.observed_at_unix_ms - 1000
    await stores.cluster.publish_load(newer)
    async with running_router(redis_url, **QUICK) as server:
        await asyncio.wait_for(server.hints_connected.wait(), 5)

        async def seen_newer() -> bool:
            return load_updates(server, "applied") >= 1

        await eventually(seen_newer)
        channel = schema.load_channel("default")
        publish_raw(redis_url, channel, older.SerializeToString())
        publish_raw(redis_url, channel, newer.SerializeToString())

        async def both_stale() -> bool:
            return load_updates(server, "stale") >= 2

        await eventually(both_stale)
        assert loads_seen(server) == dict.fromkeys(NODES, 9.0)


# -- table watcher ------------------------------------------------------------------------------


async def test_missing_or_mislabelled_table_bytes_are_nacked_then_a_repaired_store_converges(
    redis_url: str, stores: Stores
) -> None:
    good, lost, foreign, swapped = (small_plan(seed=s) for s in (1, 2, 3, 4))
    other_pool = small_plan("other", seed=3)
    v1 = await store_plan(stores, good)
    for table in (lost, foreign, swapped):
        await store_plan(stores, table)
    await rollout(stores, v1)
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    client = redis.Redis.from_url(redis_url)
    async with (
        running_router(redis_url, table_interval_s=0.1, **QUICK) as server,
        router_stub(server) as stub,
    ):
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        damage = [
            # the plan key vanished (eviction, a partial restore): nothing to fetch
            (lost.version, None, f"plan {lost.version} has no table bytes"),
            # the bytes under the version are another pool's table
            (foreign.version, encode_table(other_pool), "table is for pool 'other', not 'default'"),
            # the bytes under the version are another plan of this pool
            (swapped.version, encode_table(good), f"stored bytes hold version {good.version}"),
        ]
        for version, data, reason in damage:
            key = schema.plan_key("default", version)
            if data is None:
                client.delete(key)
            else:
                client.set(key, data)
            generation = await rollout(stores, version)

            async def nacked(generation: int = generation) -> bool:
                ack = await ack_of(stores)
                return bool(ack and ack.generation == generation and not ack.accepted)

            await eventually(nacked)
            ack = await ack_of(stores)
            assert reason in ack.reason
            assert (ack.serving_version, ack.serving_generation) == (v1, 1)
            key_name = warm_keys(good)[0]
            decision = await stub.Route(routing_pb2.RouteRequest(key=key_name))
            assert (decision.version, decision.generation) == (v1, 1)

        # repair the bytes of the last pointer's version: a mislabelled table is remembered as
        # rejected for this generation, so the router converges on the next pointer move
        client.set(schema.plan_key("default", swapped.version), encode_table(swapped))
        generation = await rollout(stores, swapped.version)

        async def converged() -> bool:
            ack = await ack_of(stores)
            return bool(ack and ack.generation == generation and ack.accepted)

        await eventually(converged)
        decision = await stub.Route(routing_pb2.RouteRequest(key=warm_keys(swapped)[0]))
        assert (decision.version, decision.generation) == (swapped.version, generation)
    client.close()


async def test_missing_table_bytes_are_retried_on_the_timer_until_they_appear(
    redis_url: str, stores: Stores
) -> None:
    table = small_plan(seed=5)
    await store_plan(stores, table)
    client = redis.Redis.from_url(redis_url)
    key = schema.plan_key("default", table.version)
    saved = client.get(key)
    assert saved is not None
    async with running_router(redis_url, table_interval_s=0.1, **QUICK) as server:
        client.delete(key)
        generation = await rollout(stores, table.version)

        async def nacked() -> bool:
            ack = await ack_of(stores)
            return bool(ack and ack.generation == generation and not ack.accepted)

        await eventually(nacked)
        errors = counted(server, "cacheroute_router_table_updates_total", "default", "error")
        assert errors >= 1
        client.set(key, saved)  # no new pointer move, no hint: the timer alone retries

        async def applied() -> bool:
            ack = await ack_of(stores)
            return bool(ack and ack.generation == generation and ack.accepted)

        await eventually(applied)
    client.close()


async def test_malformed_pool_names_in_the_store_and_in_hints_are_skipped(
    redis_url: str, stores: Stores
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.sadd(schema.POOLS_KEY, "Bad Pool!", "x" * 100)  # written around the store's checks
    table = small_plan(seed=6)
    await rollout(stores, await store_plan(stores, table))
    async with running_router(redis_url, table_interval_s=0.1, **QUICK) as server:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        publish_raw(redis_url, "cr:{Bad Pool!}:hint:table", b"1")
        publish_raw(redis_url, "cr:{Bad Pool!}:hint:load", b"\x00")

        async def serving() -> bool:
            ack = await ack_of(stores)
            return bool(ack and ack.accepted and ack.version == table.version)

        await eventually(serving)
        started = time.monotonic()
        while time.monotonic() - started < 0.3:  # a few timer ticks over the bad pool set
            await asyncio.sleep(0.05)
        assert set(server.router.pools) == {"default"}
        assert all(task.done() is False for task in server._tasks)  # no loop died of it
    client.close()
