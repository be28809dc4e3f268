"""The prefix KV cache (the Python class with its parked pinned blocks, and the C build with its
own index and LRU list) behaves exactly like the pin-count-plus-evictable-set representation the
Python class replaced.

``ReferenceCache`` is :class:`sim.kvcache.PrefixCache` as it was before the speed work (commit
4021f86): a pin-count dict plus an ordered set of the evictable blocks. Random job lifecycles
(shared prefixes, outputs stored, a repeated block now and then, a cache small enough to evict
all the time) must give the same answers and the same cache contents after every call, with the
log's trimming and rebuilding thresholds made small so that both happen often.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

import pytest

from sim.cache_impl import BlockCache
from tests.support.sim_cache import IMPLEMENTATIONS, cache_class


class ReferenceCache:
    """Block cache with pinning, LRU eviction of unpinned blocks and reservations."""

    __slots__ = ("_evictable", "_refs", "capacity", "evictions", "reserved")

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be > 0, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self.reserved = 0  # anonymous blocks promised to admitted requests
        self.evictions = 0
        self._refs: dict[int, int] = {}  # cached block hash -> pin count (0 = evictable)
        self._evictable: OrderedDict[int, None] = OrderedDict()  # pin count 0, oldest first

    # -- queries --------------------------------------------------------------------------------

    @property
    def used(self) -> int:
        """Blocks cached (pinned or evictable) plus blocks reserved."""
        return len(self._refs) + self.reserved

    @property
    def pinned(self) -> int:
        return len(self._refs) - len(self._evictable)

    def __contains__(self, block: int) -> bool:
        return block in self._refs

    def __len__(self) -> int:
        return len(self._refs)

    def match(self, blocks: Sequence[int]) -> tuple[int, int]:
        """(length of the leading run of cached blocks, how many of those are evictable now)."""
        refs = self._refs
        hit = 0
        unpinned = 0
        for block in blocks:
            count = refs.get(block)
            if count is None:
                break
            hit += 1
            if count == 0:
                unpinned += 1
        return hit, unpinned

    # -- admission and release --------------------------------------------------------------------

    def admit(self, blocks: Sequence[int], hit: int, unpinned: int, reserve: int) -> bool:
        """Pin ``blocks[:hit]`` and reserve ``reserve`` more blocks, evicting LRU blocks as needed.

        ``hit`` and ``unpinned`` come from :meth:`match` on the same, unchanged cache. Returns
        False, changing nothing, when the space cannot be found even by evicting every evictable
        block that is not part of this request's hit.
        """
        free = self.capacity - len(self._refs) - self.reserved
        if free + len(self._evictable) - unpinned < reserve:
            return False
        refs = self._refs
        evictable = self._evictable
        for block in blocks[:hit]:
            count = refs[block]
            if count == 0:
                del evictable[block]
            refs[block] = count + 1
        shortfall = reserve - free
        while shortfall > 0:
            block, _ = evictable.popitem(last=False)
            del refs[block]
            self.evictions += 1
            shortfall -= 1
        self.reserved += reserve
        return True

    def fill(self, blocks: Sequence[int]) -> None:
        """Turn reserved space into cached, pinned ``blocks`` (a prefill chunk was scheduled).

        A block another request cached meanwhile is pinned instead and its reservation returned.
        """
        refs = self._refs
        evictable = self._evictable
        for block in blocks:
            count = refs.get(block)
            if count is None:
                refs[block] = 1
            else:
                if count == 0:
                    del evictable[block]
                refs[block] = count + 1
        self.reserved -= len(blocks)

    def store(self, blocks: Sequence[int], reserved: int) -> int:
        """Cache a finished request's generated ``blocks`` as evictable; return reservations used.

        vLLM V1 keeps the full blocks of a request's output in the prefix cache when it finishes.
        The space comes from the request's own reservation first (its output blocks were
        reserved at admission), then from free space, then by evicting the least recently
        released block; a block that finds no space is dropped. Call before :meth:`release`, so
        the output (the sequence's tail) is older than the prompt and evicted first.
        """
        refs = self._refs
        evictable = self._evictable
        used = 0
        for block in reversed(blocks):
            count = refs.get(block)
            if count is not None:
                if count == 0:
                    evictable.move_to_end(block)
                continue
            if used < reserved:
                used += 1
                self.reserved -= 1
            elif len(refs) + self.reserved >= self.capacity:
                if not evictable:
                    continue
                old, _ = evictable.popitem(last=False)
                del refs[old]
                self.evictions += 1
            refs[block] = 0
            evictable[block] = None
        return used

    def warm(self, recent_first: Sequence[int]) -> None:
        """Pre-fill an empty cache with evictable blocks, ``recent_first[0]`` the most recent.

        What an LRU cache holds after a stretch of traffic is the ``capacity`` most recently used
        distinct blocks in recency order; :mod:`sim.steady` computes that list from a replay of
        the preceding window, and this installs it. Extra blocks past the capacity are ignored.
        """
        if self._refs or self.reserved:
            raise ValueError("warm() needs an empty cache")
        keep = list(recent_first[: self.capacity])
        keep.reverse()
        self._refs = dict.fromkeys(keep, 0)
        self._evictable = OrderedDict.fromkeys(keep)

    def release(self, blocks: Sequence[int], reserved: int) -> None:
        """Unpin a finished request's cached ``blocks`` and return its ``reserved`` blocks."""
        refs = self._refs
        evictable = self._evictable
        for block in reversed(blocks):
            count = refs[block] - 1
            refs[block] = count
            if count == 0:
                evictable[block] = None
        self.reserved -= reserved


def prompt(rng: random.Random) -> tuple[int, ...]:
    head = [rng.randrange(6) * 100 + i for i in range(rng.randrange(1, 7))]
    tail = [rng.randrange(10_000, 10_300) for _ in range(rng.randrange(0, 6))]
    blocks = head + tail
    if rng.random() < 0.05 and blocks:
        blocks.append(rng.choice(blocks))
    return tuple(blocks)


def state(cache: BlockCache | ReferenceCache, seen: set[int]) -> tuple[object, ...]:
    return (len(cache), cache.used, cache.pinned, cache.reserved, cache.evictions,
            sorted(b for b in seen if b in cache))  # fmt: skip


def widen(blocks: tuple[int, ...]) -> tuple[int, ...]:
    """The same blocks spread over the whole key range, negative and past 2**63 included."""
    return tuple((b * 0x9E3779B97F4A7C15) % 2**64 - (2**63 if b % 3 == 0 else 0) for b in blocks)


# Key width matters to the C build only (128-bit keys in its own index); a dict hashes any int.
SHAPES = [(name, "small") for name in IMPLEMENTATIONS] + [("c", "wide")]


@pytest.mark.parametrize(("implementation", "keys"), SHAPES)
@pytest.mark.parametrize(("capacity", "seed"), [(12, 1), (30, 2), (80, 3), (400, 4)])
def test_random_lifecycles_match_the_reference_after_every_call(
    capacity: int, seed: int, implementation: str, keys: str
) -> None:
    rng = random.Random(seed)
    fast, slow = cache_class(implementation)(capacity), ReferenceCache(capacity)
    key = widen if keys == "wide" else tuple
    warm = list(key(tuple(rng.randrange(20_000, 20_050) for _ in range(capacity + 5))))
    fast.warm(warm)
    slow.warm(warm)
    seen: set[int] = set(warm)
    running: list[tuple[tuple[int, ...], tuple[int, ...], int, int]] = []
    for _ in range(4000):
        if running and (rng.random() < 0.5 or len(running) > 6):
            blocks, outputs, filled, reserved = running.pop(rng.randrange(len(running)))
            used = fast.store(outputs, reserved)
            assert slow.store(outputs, reserved) == used
            fast.release(blocks[:filled], reserved - used)
            slow.release(blocks[:filled], reserved - used)
        else:
            blocks = key(prompt(rng))
            outputs = key(tuple(rng.randrange(30_000, 30_400) for _ in range(rng.randrange(0, 3))))
            seen.update(blocks + outputs)
            hit, unpinned = fast.match(blocks)
            assert slow.match(blocks) == (hit, unpinned)
            reserve = len(blocks) - hit + len(outputs)
            admitted = fast.admit(blocks, hit, unpinned, reserve)
            assert slow.admit(blocks, hit, unpinned, reserve) == admitted
            if admitted:
                fast.fill(blocks[hit:])
                slow.fill(blocks[hit:])
                running.append((blocks, outputs, len(blocks), len(outputs)))
        assert state(fast, seen) == state(slow, seen)
    assert fast.evictions > 100
