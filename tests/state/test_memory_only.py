"""What only the in-memory twin has: named states, an injected outage, an injected clock."""

from __future__ import annotations

import asyncio

import pytest

from cacheroute_state import Stores, memory, open_stores
from cacheroute_state.interfaces import StoreUnavailableError
from tests.support.factories import store_plan


async def test_stores_opened_on_one_name_share_the_state(memory_url: str) -> None:
    first, second = open_stores(memory_url), open_stores(memory_url)
    version = await store_plan(first)
    assert await second.plans.get_table_bytes("default", version) is not None
    other = open_stores(f"{memory_url}-other")
    try:
        assert await other.plans.pools() == []
    finally:
        memory.forget(f"{memory_url}-other")


async def test_outage_fails_calls_ends_subscriptions_and_recovers(
    memory_url: str, memory_stores: Stores
) -> None:
    state = memory.memory_state(memory_url)
    version = await store_plan(memory_stores)
    hints = memory_stores.hints.subscribe(None)
    assert (await anext(hints)).kind == "resync"
    state.go_away()
    with pytest.raises(StoreUnavailableError):
        await memory_stores.plans.get_active("default")
    with pytest.raises(StoreUnavailableError):
        await asyncio.wait_for(anext(hints), timeout=5)
    state.come_back()
    assert await memory_stores.plans.get_table_bytes("default", version) is not None
    state.go_away()
    state.come_back(lose_data=True)  # as a Redis restarted without persistence
    assert await memory_stores.plans.get_table_bytes("default", version) is None


async def test_leases_expire_by_the_injected_clock(memory_url: str, memory_stores: Stores) -> None:
    now = [1000.0]
    memory.memory_state(memory_url).clock = lambda: now[0]
    assert await memory_stores.leases.acquire_or_renew("leader", "cp-1", 300)
    now[0] += 0.299
    assert not await memory_stores.leases.acquire_or_renew("leader", "cp-2", 300)
    now[0] += 0.002
    assert await memory_stores.leases.holder("leader") is None
    assert await memory_stores.leases.acquire_or_renew("leader", "cp-2", 300)


def test_a_url_of_another_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="memory://"):
        memory.memory_state("redis://127.0.0.1:6379/0")
