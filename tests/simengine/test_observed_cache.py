"""The KV-event recording cache reports each block's arrival and departure once, in order."""

from __future__ import annotations

from simengine.observed_cache import ObservedPrefixCache


def test_stores_and_evictions_are_reported_in_the_order_they_happen() -> None:
    cache = ObservedPrefixCache(3)
    assert cache.admit((1, 2), 0, 0, 2)
    cache.fill((1, 2))
    cache.release((1, 2), 0)
    assert cache.admit((3, 4), 0, 0, 2)  # one block short: evicts 2 (released tail first)
    cache.fill((3, 4))
    assert cache.drain() == [(True, [1, 2]), (False, [2]), (True, [3, 4])]
    assert cache.drain() == []


def test_a_pinned_block_that_eviction_stepped_over_is_not_stored_twice() -> None:
    """Eviction parks the pinned blocks it meets (sim.kvcache); filling one again pins it once
    more, and it never left the cache, so no second BlockStored."""
    cache = ObservedPrefixCache(3)
    assert cache.admit((1,), 0, 0, 1)
    cache.fill((1,))  # 1 stays pinned, at the head of the order
    assert cache.admit((2,), 0, 0, 1)
    cache.fill((2,))
    cache.release((2,), 0)  # 2 evictable, behind 1
    assert cache.admit((5, 6), 0, 0, 2)  # 1 free block: evicts one, stepping over pinned 1
    assert 1 in cache and 2 not in cache
    cache.drain()
    cache.fill((1,))  # a reserved block of another request turns out to be 1: already there
    assert all(1 not in hashes for stored, hashes in cache.drain() if stored)
