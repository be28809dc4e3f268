"""What only the Redis side has: channel names, a server that goes away, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from cacheroute_state.interfaces import StoreUnavailableError
from cacheroute_state.redis_hints import parse_channel
from tests.support.factories import store_plan

pytestmark = pytest.mark.redis


def test_parse_channel() -> None:
    assert parse_channel("cr:{a.b}:hint:table") == ("table", "a.b")
    assert parse_channel("cr:{x}:hint:load") == ("load", "x")
    assert parse_channel("cr:hint:pools") == ("pools", "")
    assert parse_channel("cr:{x}:hint:other") is None
    assert parse_channel("elsewhere") is None


async def test_redis_away_raises_unavailable_and_recovers() -> None:
    server = EmbeddedRedis().start()
    stores = open_stores(server.url)
    try:
        version = await store_plan(stores, 1)
        port = server.port
        server.stop()
        with pytest.raises(StoreUnavailableError):
            await stores.plans.get_active("default")
        restarted = EmbeddedRedis(port=port).start()
        try:
            assert await stores.plans.get_table_bytes("default", version) is None  # not persisted
            await store_plan(stores, 1)
            assert await stores.plans.get_table_bytes("default", version) is not None
        finally:
            restarted.stop()
    finally:
        await stores.close()
        server.stop()


def test_embedded_redis_with_data_dir_survives_restart(tmp_path: Path) -> None:
    data = tmp_path / "redis"
    with EmbeddedRedis(data_dir=data) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
        port = server.port
    with EmbeddedRedis(port=port, data_dir=data) as server:
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        client.close()
