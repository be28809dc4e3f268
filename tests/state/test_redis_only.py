"""What only the Redis side has: channel names, a server that goes away, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from cacheroute_state import embedded, open_stores
from cacheroute_state.embedded import EmbeddedRedis, EmbeddedRedisError
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


def test_embedded_redis_moves_off_a_port_taken_since_it_was_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Test workers choose free ports concurrently: a port another server took in between must
    not make this one connect to that server (it answers PING) or fail to start."""
    with EmbeddedRedis() as other:
        ports = iter([other.port])
        real_free_port = embedded.free_port
        monkeypatch.setattr(embedded, "free_port", lambda: next(ports, None) or real_free_port())
        with EmbeddedRedis() as server:
            assert server.port != other.port
            assert server.url.endswith(f":{server.port}/0")
            client = redis.Redis.from_url(server.url)
            assert client.info("server")["process_id"] == server.pid
            client.close()


def test_embedded_redis_on_a_given_port_that_is_taken_says_so_and_leaves_nothing() -> None:
    with EmbeddedRedis() as other:
        refused = EmbeddedRedis(port=other.port)
        with pytest.raises(EmbeddedRedisError, match="port is in use"):
            refused.start()
        assert not refused.dir.exists()  # its temporary directory went with it
        assert not refused.running()
