"""Per-key request counts in bounded memory: Space-Saving heavy hitters plus the exact total.

The control plane estimates key rates from these reports, so a router must count every request
yet may hold only ``capacity`` keys. Space-Saving (Metwally, Agrawal, El Abbadi 2005) does exactly
that: it monitors at most ``capacity`` keys; a key not monitored replaces the one with the smallest
count ``m`` and starts at ``m + weight`` with error ``m``. Every key whose true count exceeds
``total / capacity`` is monitored, and a monitored key's true count lies in
``[count - error, count]`` (what :class:`cacheroute.v1.KeyCount` carries).

The hot path only appends the key to a buffer (:meth:`TrafficCounter.add`, ~0.1 µs); the buffer is
folded into the summary in batches of :data:`FOLD_EVERY` with a C-speed ``Counter`` first, which
turns a hot key's thousand hits into one weighted update. The minimum is found with a lazy heap:
entries are lower bounds of the counts, so a stale top is re-pushed with its current count until
the top is exact (amortised O(log capacity) per eviction).

Each report also carries, per top key, the key's reusable-prefix size when the router sampled it
(:mod:`dataplane.core.prefix_sizes`): :meth:`TrafficCounter.add` says when a sample is due, and
the caller hands that request to :attr:`TrafficCounter.sizes`.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Collection, Mapping
from typing import NamedTuple

from cacheroute.v1 import cluster_pb2
from dataplane.core.prefix_sizes import SAMPLE_EVERY, PrefixSizes

FOLD_EVERY = 1024
_SAMPLE_MASK = SAMPLE_EVERY - 1


class SpaceSaving:
    """Weighted Space-Saving over 64-bit key hashes, with a readable label per monitored key."""

    __slots__ = ("_counts", "_errors", "_heap", "_labels", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._counts: dict[int, int] = {}
        self._errors: dict[int, int] = {}
        self._labels: dict[int, str] = {}
        self._heap: list[tuple[int, int]] = []  # (count when pushed, key): one entry per key

    def __len__(self) -> int:
        return len(self._counts)

    def monitored(self) -> Collection[int]:
        """The monitored key hashes (a live view: read it before the next update)."""
        return self._counts.keys()

    def update(self, key_hash: int, weight: int, label: str) -> None:
        counts = self._counts
        count = counts.get(key_hash)
        if count is not None:
            counts[key_hash] = count + weight
            return
        self._insert(key_hash, weight, label)

    def update_many(self, weights: Mapping[int, int], labels: Mapping[int, str]) -> None:
        """:meth:`update` of every ``(key_hash, weight)`` in order, the label from ``labels``
        (a fold's loop: a monitored key costs a dictionary update, not a method call)."""
        counts = self._counts
        for key_hash, weight in weights.items():
            count = counts.get(key_hash)
            if count is not None:
                counts[key_hash] = count + weight
            else:
                self._insert(key_hash, weight, labels[key_hash])

    def _insert(self, key_hash: int, weight: int, label: str) -> None:
        counts = self._counts
        if len(counts) < self.capacity:
            counts[key_hash] = weight
            self._errors[key_hash] = 0
            self._labels[key_hash] = label
            heapq.heappush(self._heap, (weight, key_hash))
            return
        floor, victim = self._pop_min()
        del counts[victim], self._errors[victim], self._labels[victim]
        counts[key_hash] = floor + weight
        self._errors[key_hash] = floor
        self._labels[key_hash] = label
        heapq.heappush(self._heap, (floor + weight, key_hash))

    def _pop_min(self) -> tuple[int, int]:
        heap, counts = self._heap, self._counts
        while True:
            pushed, key = heap[0]
            current = counts[key]
            if current == pushed:
                heapq.heappop(heap)
                return current, key
            heapq.heapreplace(heap, (current, key))

    def top(self) -> list[tuple[int, str, int, int]]:
        """``(key_hash, label, count, error)`` of every monitored key, largest count first."""
        errors, labels = self._errors, self._labels
        ranked = sorted(self._counts.items(), key=lambda item: (-item[1], item[0]))
        return [(key, labels[key], count, errors[key]) for key, count in ranked]


class TrafficCounter:
    """One pool's window: a key buffer folded into a :class:`SpaceSaving`, plus the total."""

    __slots__ = ("_hashes", "_keys", "_summary", "sizes", "total", "window_start_ms")

    def __init__(self, capacity: int) -> None:
        self._summary = SpaceSaving(capacity)
        self._hashes: list[int] = []
        self._keys: list[str] = []
        self.sizes = PrefixSizes(2 * capacity)
        self.total = 0
        self.window_start_ms = int(time.time() * 1000)

    def add(self, key_hash: int, key: str) -> bool:
        """Count one request (the hot path: two appends, a fold every FOLD_EVERY calls).

        True every SAMPLE_EVERY-th call: the caller then hands this request to ``sizes.sample``
        (FOLD_EVERY is a multiple of SAMPLE_EVERY, so the cadence is steady).
        """
        hashes = self._hashes
        hashes.append(key_hash)
        self._keys.append(key)
        n = len(hashes)
        if n >= FOLD_EVERY:
            self.fold()
        return not n & _SAMPLE_MASK

    def fold(self) -> None:
        hashes, keys = self._hashes, self._keys
        if not hashes:
            return
        self._summary.update_many(Counter(hashes), dict(zip(hashes, keys, strict=True)))
        self.total += len(hashes)
        self._hashes, self._keys = [], []

    def close_window(self, now_ms: int) -> Window | None:
        """End the window (None when nothing was routed) and start a new one; O(1) but the fold.

        The returned :class:`Window` is no longer touched by :meth:`add`, so its report can be
        built on another thread.
        """
        self.fold()
        sizes = self.sizes.take(self._summary.monitored())
        window = Window(self._summary, self.total, self.window_start_ms, now_ms, sizes)
        self.window_start_ms = now_ms
        if self.total == 0:
            return None
        self._summary = SpaceSaving(self._summary.capacity)
        self.total = 0
        return window

    def drain(self, router_id: str, pool: str, now_ms: int) -> cluster_pb2.TrafficReport | None:
        """The window's report (None when nothing was routed); the counter starts a new window."""
        window = self.close_window(now_ms)
        return None if window is None else window.report(router_id, pool)


class Window(NamedTuple):
    """A closed traffic window: its heavy hitters, total and time span."""

    summary: SpaceSaving
    total: int
    start_ms: int
    end_ms: int
    sizes: dict[int, tuple[int, int]]  # key → (shared prefix blocks summed, comparisons)

    def report(self, router_id: str, pool: str) -> cluster_pb2.TrafficReport:
        report = cluster_pb2.TrafficReport(
            router_id=router_id,
            pool=pool,
            window_start_unix_ms=self.start_ms,
            window_end_unix_ms=self.end_ms,
            total_requests=self.total,
        )
        add = report.top_keys.add
        sizes = self.sizes
        for key_hash, label, count, error in self.summary.top():
            sized = sizes.get(key_hash)
            if sized is None:
                add(key_hash=key_hash, key=label, count=count, error=error)
            else:
                add(
                    key_hash=key_hash, key=label, count=count, error=error,
                    reusable_prefix_blocks=sized[0] / sized[1], prefix_samples=sized[1],
                )  # fmt: skip
        return report
