"""The per-destination prefix cache: leading-run hits, pinning, LRU eviction, reservations."""

from __future__ import annotations

import pytest

from sim.cache_impl import BlockCache
from tests.support.sim_cache import IMPLEMENTATIONS, cache_class

Make = type[BlockCache]


@pytest.fixture(params=IMPLEMENTATIONS)
def make(request: pytest.FixtureRequest) -> Make:
    """Every test runs on the Python reference and on the C build."""
    return cache_class(request.param)


def admit_and_fill(cache: BlockCache, blocks: tuple[int, ...], extra: int = 0) -> int:
    """Admit a request for ``blocks`` (+ ``extra`` output blocks), fill its prompt, return hit."""
    hit, unpinned = cache.match(blocks)
    assert cache.admit(blocks, hit, unpinned, len(blocks) - hit + extra)
    cache.fill(blocks[hit:])
    return hit


def test_hit_is_the_longest_leading_run_of_cached_blocks(make: Make) -> None:
    cache = make(100)
    admit_and_fill(cache, (1, 2, 3))
    cache.release((1, 2, 3), 0)
    assert cache.match((1, 2, 3, 4)) == (3, 3)
    assert cache.match((1, 9, 3)) == (1, 1)  # block 3 is cached but not after a miss
    assert cache.match((9, 1, 2)) == (0, 0)


def test_unpinned_blocks_evict_least_recently_released_first(make: Make) -> None:
    cache = make(6)
    admit_and_fill(cache, (1, 2, 3))
    cache.release((1, 2, 3), 0)
    admit_and_fill(cache, (4, 5, 6))
    cache.release((4, 5, 6), 0)
    assert len(cache) == 6
    admit_and_fill(cache, (7, 8))  # needs 2 blocks: the two oldest evictable go
    # release order puts a request's tail first in line, so 3 then 2 of the older request go
    assert 3 not in cache and 2 not in cache
    assert 1 in cache and all(b in cache for b in (4, 5, 6, 7, 8))
    assert cache.evictions == 2


def test_pinned_blocks_are_never_evicted_and_admission_fails_instead(make: Make) -> None:
    cache = make(4)
    admit_and_fill(cache, (1, 2, 3))  # running: pinned
    hit, unpinned = cache.match((7, 8))
    assert not cache.admit((7, 8), hit, unpinned, 2)  # only 1 free block, nothing evictable
    assert all(b in cache for b in (1, 2, 3)) and cache.used == 3
    cache.release((1, 2, 3), 0)
    assert cache.admit((7, 8), hit, unpinned, 2)


def test_a_hit_pins_its_blocks_so_they_survive_the_requests_own_eviction(make: Make) -> None:
    cache = make(4)
    admit_and_fill(cache, (1, 2))
    cache.release((1, 2), 0)
    admit_and_fill(cache, (5, 6))
    cache.release((5, 6), 0)
    # (1, 2, 3, 4): hits 1 and 2 (evictable), needs 2 more blocks: must evict 5 and 6, not 1, 2
    assert admit_and_fill(cache, (1, 2, 3, 4)) == 2
    assert all(b in cache for b in (1, 2, 3, 4)) and 5 not in cache and 6 not in cache
    assert cache.pinned == 4


def test_admission_counts_only_evictable_blocks_outside_the_hit(make: Make) -> None:
    cache = make(3)
    admit_and_fill(cache, (1, 2, 3))
    cache.release((1, 2, 3), 0)
    hit, unpinned = cache.match((1, 2, 3, 4, 5))
    assert (hit, unpinned) == (3, 3)
    assert not cache.admit((1, 2, 3, 4, 5), hit, unpinned, 2)  # would have to evict its own hit
    assert cache.pinned == 0 and len(cache) == 3


def test_reservations_take_space_until_released(make: Make) -> None:
    cache = make(10)
    admit_and_fill(cache, (1, 2), extra=3)  # 2 prompt blocks + 3 output blocks
    assert cache.used == 5 and cache.reserved == 3
    cache.release((1, 2), 3)
    assert cache.used == 2 and cache.reserved == 0 and cache.pinned == 0


def test_filling_a_block_someone_else_cached_returns_its_reservation(make: Make) -> None:
    cache = make(10)
    hit, unpinned = cache.match((1, 2))
    assert cache.admit((1, 2), hit, unpinned, 2)
    other_hit, other_unpinned = cache.match((1, 2))
    assert other_hit == 0  # nothing cached yet: both reserve
    assert cache.admit((1, 2), other_hit, other_unpinned, 2)
    cache.fill((1, 2))
    cache.fill((1, 2))  # already there: pinned twice, the second reservation returned
    assert cache.used == 2 and cache.reserved == 0 and cache.pinned == 2
    cache.release((1, 2), 0)
    cache.release((1, 2), 0)
    assert cache.pinned == 0


def test_capacity_must_be_positive(make: Make) -> None:
    with pytest.raises(ValueError, match="capacity_blocks"):
        make(0)


def test_store_uses_the_requests_reservation_then_evicts_the_oldest_block(make: Make) -> None:
    cache = make(4)
    assert cache.admit((1, 2), 0, 0, 3)  # 2 prompt blocks + 1 output block reserved
    cache.fill((1, 2))
    used = cache.store((10, 11), 1)  # two output blocks, one reservation left
    assert used == 1
    cache.release((1, 2), 1 - used)
    assert cache.used == 4 and cache.reserved == 0
    assert all(b in cache for b in (1, 2, 10, 11))
    # The output tail (11) is the oldest evictable block: it goes first.
    assert cache.admit((7,), 0, 0, 1)
    assert 11 not in cache and 10 in cache


def test_warm_installs_blocks_in_recency_order(make: Make) -> None:
    cache = make(3)
    cache.warm([5, 6, 7, 8])  # 5 most recent; 8 does not fit
    assert len(cache) == 3 and 8 not in cache
    assert cache.admit((9,), 0, 0, 1)  # evicts the least recent kept block, 7
    assert 7 not in cache and 5 in cache and 6 in cache


def test_keys_are_python_ints_over_the_whole_64_bit_range_and_stay_distinct(make: Make) -> None:
    """Chained block hashes are unsigned 64-bit, synthetic ones may be negative: -1 and 2**64-1
    are different blocks, as they are in a dict."""
    cache = make(10)
    edges = (-(2**63), -1, 0, 2**63 - 1, 2**63, 2**64 - 1)
    admit_and_fill(cache, edges)
    assert all(b in cache for b in edges) and len(cache) == 6
    assert cache.match((-1, 2**64 - 1)) == (2, 0)
    assert 2**64 - 2 not in cache and -2 not in cache and "x" not in cache  # type: ignore[operator]


def test_the_c_build_refuses_a_block_that_is_not_a_64_bit_int_and_changes_nothing() -> None:
    """The Python class takes any hashable block; the C one stores 128-bit keys and says so."""
    c_cache = cache_class("c")(10)
    with pytest.raises(TypeError, match="must be an int"):
        c_cache.fill(("x",))  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        c_cache.match((2**64,))
    with pytest.raises(OverflowError):
        c_cache.fill((-(2**63) - 1,))
    assert len(c_cache) == 0 and c_cache.used == 0
