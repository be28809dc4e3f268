"""A :class:`sim.kvcache.PrefixCache` that records what it stores and evicts, for KV events.

The simulator's cache stays as it is (its loops are the simulator's hottest code); this subclass
wraps the four places where a block enters or leaves the cache and appends to :attr:`events`,
which the engine drains after every step into one published batch. Entries are
``(True, hashes)`` for stored and ``(False, hashes)`` for removed blocks, in the order they
happened, consecutive entries of one kind merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice

from sim.kvcache import PrefixCache


class ObservedPrefixCache(PrefixCache):
    """Records block stores and evictions (module docstring)."""

    __slots__ = ("events",)

    def __init__(self, capacity_blocks: int) -> None:
        super().__init__(capacity_blocks)
        self.events: list[tuple[bool, list[int]]] = []

    def _note(self, stored: bool, blocks: list[int]) -> None:
        if not blocks:
            return
        events = self.events
        if events and events[-1][0] == stored:
            events[-1][1].extend(blocks)
        else:
            events.append((stored, blocks))

    def drain(self) -> list[tuple[bool, list[int]]]:
        events, self.events = self.events, []
        return events

    def _evict(self, n: int) -> None:
        # The n oldest unpinned blocks, in the order the parent pops them (pinned ones skipped).
        unpinned = (block for block, count in self._blocks.items() if not count)
        self._note(False, list(islice(unpinned, n)))
        super()._evict(n)

    def fill(self, blocks: Sequence[int]) -> None:
        # ``self``, not ``self._blocks``: a parked block (pinned, stepped over by eviction) is
        # cached too, and filling it again stores nothing.
        new = [b for b in blocks if b not in self]
        super().fill(blocks)
        self._note(True, list(dict.fromkeys(new)))

    def store(self, blocks: Sequence[int], reserved: int) -> int:
        cached = self._blocks
        new = [b for b in blocks if b not in cached]
        used = super().store(blocks, reserved)
        self._note(True, [b for b in dict.fromkeys(new) if b in cached])
        return used

    def warm(self, recent_first: Sequence[int]) -> None:
        super().warm(recent_first)
        self._note(True, list(reversed(self._blocks)))
