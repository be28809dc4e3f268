"""The shared state behind the in-memory stores: plain dicts, a hint bus, an outage switch.

One :class:`MemoryState` plays one Redis: every store opened on it sees the same records, and
every subscription on it sees the hints the stores publish. Everything runs on one event loop, so
an operation that does not await is atomic, as a Lua script is in Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from cacheroute_state.interfaces import Hint, ReportRecord, StoreUnavailableError

T = TypeVar("T")
HINT_QUEUE = 10_000  # per subscriber; past it hints are dropped (they are only nudges)


@dataclass
class Stream:
    """An append-only log with Redis-style ids (``<ms>-<seq>``), trimmed to ``maxlen``."""

    maxlen: int
    entries: list[tuple[tuple[int, int], bytes]] = field(default_factory=list)
    last: tuple[int, int] = (0, 0)

    def append(self, data: bytes, now_ms: int) -> None:
        ms = max(now_ms, self.last[0])
        self.last = (ms, self.last[1] + 1 if ms == self.last[0] else 0)
        self.entries.append((self.last, data))
        if len(self.entries) > self.maxlen:
            del self.entries[: len(self.entries) - self.maxlen]

    def after(self, cursor: str, count: int) -> list[tuple[str, bytes]]:
        start = parse_id(cursor)
        picked = [(i, d) for i, d in self.entries if i > start][:count]
        return [(f"{i[0]}-{i[1]}", d) for i, d in picked]

    def newest(self, count: int) -> list[bytes]:
        """The newest ``count`` entries, oldest first."""
        return [d for _, d in self.entries[-count:]] if count > 0 else []


def first(items: list[T], limit: int) -> list[T]:
    """``items[0 .. limit-1]`` with Redis' inclusive, negative-aware end (LRANGE/ZREVRANGE 0 N-1):
    a limit of 0 reads everything, as it does against Redis."""
    end = limit - 1
    return items[: end + 1] if end >= 0 else items[: len(items) + end + 1]


def parse_id(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return int(ms), int(seq or 0)


class MemoryState:
    """One in-process "Redis" (module docstring). ``clock`` gives wall-clock ms (injectable)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.subscribers: set[asyncio.Queue[Hint | StoreUnavailableError]] = set()
        self.outage: StoreUnavailableError | None = None
        self._reset()

    def _reset(self) -> None:
        self.strings: dict[str, bytes] = {}
        self.hashes: defaultdict[str, dict[str, bytes]] = defaultdict(dict)
        self.lists: defaultdict[str, list[str]] = defaultdict(list)
        self.sorted: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self.streams: dict[str, Stream] = {}
        self.reports: dict[tuple[str, str], ReportRecord] = {}  # (pool, node id) → latest
        self.pools: set[str] = set()
        self.leases: dict[str, tuple[str, float]] = {}  # name → (holder, expires at ``clock``)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def check(self) -> None:
        """Raise the injected outage, as a Redis that cannot be reached would."""
        if self.outage is not None:
            raise self.outage

    def stream(self, key: str, maxlen: int) -> Stream:
        found = self.streams.get(key)
        if found is None:
            found = self.streams[key] = Stream(maxlen)
        return found

    def publish(self, hint: Hint) -> None:
        for queue in self.subscribers:
            if queue.qsize() < HINT_QUEUE:
                queue.put_nowait(hint)

    def go_away(self, reason: str = "in-memory store switched off") -> None:
        """Simulate an outage: every call raises, every subscription ends."""
        self.outage = StoreUnavailableError(f"store unavailable: {reason}")
        for queue in self.subscribers:
            queue.put_nowait(self.outage)

    def come_back(self, *, lose_data: bool = False) -> None:
        """End the outage (``lose_data``: as a Redis restarted without persistence)."""
        self.outage = None
        if lose_data:
            self._reset()
