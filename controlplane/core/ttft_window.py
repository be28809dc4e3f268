"""A pool's p99 TTFT over a time window, from the agents' cumulative TTFT histograms.

Each agent report carries its engine's TTFT histogram as the engine exports it: cumulative since
the engine started (``NodeReport.ttft``). Per node, :class:`NodeWindow` keeps the *delta* between
consecutive reports, stamped with the later one's receive time (the control plane's clock, the
one the guard judges windows by). A count or bucket that went down is a counter reset (the engine
restarted): the new cumulative values are then the delta, as Prometheus's ``increase`` does; a
changed bucket layout starts the node afresh (no delta across it).

:func:`merge` adds the deltas of a window over the pool's nodes (nodes with different bucket
bounds are merged onto the union of bounds, each node's cumulative count at a bound it lacks
taken at its largest bound below: an under-count, so the quantile errs high, the safe side for
a guard); :func:`quantile` is Prometheus's ``histogram_quantile``: linear interpolation inside
the bucket that holds the rank, the lowest bucket starting at 0, and the highest finite bound
when the rank falls in +Inf.

A delta larger than :data:`MAX_RATE_PER_S` observations a second since the node's previous
reading (at least one second) is not believable of one engine and is dropped (counted in
``implausible``; the node carries on from the new reading): one node once reported counts that
moved its pool's p99 from 2.33 s to 0.01 s. A node can still weigh at most that rate.

Deltas of one node within the same second are kept as one (stamped with the latest receive
time), so a window costs at most one histogram per node-second however often agents report;
window edges are therefore exact to a second. Pure: no I/O; the control plane feeds it from the
reports it reads for load snapshots.

Sources: an engine that exports no TTFT histogram (llama.cpp's ``llama-server``) would leave the
windows empty, so the routers' own measurement (arrival to the answer's first body byte, per
destination node, each traffic report carrying its window's observations: deltas, added with
:meth:`TtftWindows.add`) is kept beside the engines' under the source ``router:<id>``. A window
uses a node's engine readings when it has any and the routers' readings of that node otherwise,
never both (one request would count twice); :class:`WindowQuantile` says which sources it used.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_RETENTION_MS = 15 * 60_000
SLOT_MS = 1_000  # deltas within one second of a node are kept as one (stamped with the latest)
ENGINE = "engine"  # the source of an agent's reading; a router's is "router:<router id>"
MAX_RATE_PER_S = 2_000.0  # TTFT observations a second one engine may report (far above any)


@dataclass(frozen=True)
class Buckets:
    """Cumulative counts at finite ``bounds`` plus the total (the +Inf bucket)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float

    @classmethod
    def empty(cls) -> Buckets:
        return cls((), (), 0.0)

    def at(self, bound: float) -> float:
        """Cumulative count at ``bound``: the count at the largest own bound <= it."""
        i = bisect.bisect_right(self.bounds, bound) - 1
        return self.cumulative[i] if i >= 0 else 0.0


def _decreased(old: Buckets, new: Buckets) -> bool:
    return new.total < old.total or any(
        b < a for a, b in zip(old.cumulative, new.cumulative, strict=True)
    )


def delta(old: Buckets | None, new: Buckets) -> Buckets | None:
    """Observations between two cumulative readings; None across a layout change (or first)."""
    if old is None or old.bounds != new.bounds:
        return None
    if _decreased(old, new):
        return new  # the engine restarted: everything since is new
    return Buckets(
        new.bounds,
        tuple(b - a for a, b in zip(old.cumulative, new.cumulative, strict=True)),
        new.total - old.total,
    )


class NodeWindow:
    """One node's deltas over the last ``retention_ms``."""

    def __init__(self, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.retention_ms = retention_ms
        self.last: Buckets | None = None
        self.last_at_ms = 0
        self.resets = 0
        self.implausible = 0
        self.deltas: deque[tuple[int, Buckets]] = deque()

    def observe(self, at_ms: int, reading: Buckets) -> bool:
        """Add one reading; False when it is not newer than the last one (the same report)."""
        if at_ms <= self.last_at_ms:
            return False
        step = delta(self.last, reading)
        if step is not None and self.last is not None and step is reading:
            self.resets += 1
        elapsed_s = max(1.0, (at_ms - self.last_at_ms) / 1000) if self.last is not None else 1.0
        if step is not None and step.total > MAX_RATE_PER_S * elapsed_s:
            self.implausible += 1
            step = None
        self.last, self.last_at_ms = reading, at_ms
        if step is not None:
            self.add(at_ms, step)
        return True

    def add(self, at_ms: int, step: Buckets) -> None:
        """Keep one delta (observations new at ``at_ms``), and drop those past the retention."""
        if step.total > 0:
            held = self.deltas[-1] if self.deltas else None
            same_slot = held is not None and held[0] // SLOT_MS == at_ms // SLOT_MS
            if held is not None and same_slot and held[1].bounds == step.bounds:
                self.deltas[-1] = (max(at_ms, held[0]), _add(held[1], step))
            else:
                self.deltas.append((at_ms, step))
        while self.deltas and self.deltas[0][0] < at_ms - self.retention_ms:
            self.deltas.popleft()

    def between(self, start_ms: int, end_ms: int) -> list[Buckets]:
        """Deltas stamped in ``(start_ms, end_ms]``."""
        return [b for at, b in self.deltas if start_ms < at <= end_ms]


def _add(a: Buckets, b: Buckets) -> Buckets:
    """The sum of two histograms of the same bounds."""
    summed = tuple(x + y for x, y in zip(a.cumulative, b.cumulative, strict=True))
    return Buckets(a.bounds, summed, a.total + b.total)


def merge(parts: Iterable[Buckets]) -> Buckets:
    """The sum of histograms (onto the union of their bounds, see the module docstring)."""
    by_bounds: dict[tuple[float, ...], list[float]] = {}
    totals: dict[tuple[float, ...], float] = {}
    for p in parts:  # the common case, one bucket layout: plain element-wise sums
        held = by_bounds.get(p.bounds)
        if held is None:
            by_bounds[p.bounds] = list(p.cumulative)
            totals[p.bounds] = p.total
        else:
            for i, c in enumerate(p.cumulative):
                held[i] += c
            totals[p.bounds] += p.total
    found = [Buckets(b, tuple(c), totals[b]) for b, c in by_bounds.items()]
    if not found:
        return Buckets.empty()
    if len(found) == 1:
        return found[0]
    bounds = tuple(sorted({b for p in found for b in p.bounds}))
    cumulative = tuple(math.fsum(p.at(b) for p in found) for b in bounds)
    return Buckets(bounds, cumulative, math.fsum(p.total for p in found))


def quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus's histogram_quantile of ``buckets``; None with no observations."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if buckets.total <= 0:
        return None
    rank = q * buckets.total
    i = bisect.bisect_left(buckets.cumulative, rank)
    if i >= len(buckets.bounds):  # in +Inf: the highest finite bound (or nothing known)
        return buckets.bounds[-1] if buckets.bounds else None
    upper = buckets.bounds[i]
    lower = buckets.bounds[i - 1] if i > 0 else min(0.0, upper)
    below = buckets.cumulative[i - 1] if i > 0 else 0.0
    inside = buckets.cumulative[i] - below
    if inside <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / inside


ENGINES, ROUTERS = "engines", "routers"


@dataclass(frozen=True)
class WindowQuantile:
    value_s: float | None  # None: no observations
    samples: float  # observations in the window, over the pool's nodes
    nodes: int  # nodes that contributed
    # Who measured the samples: "engines", "routers", "engines and routers"; "" with none.
    source: str = ""


class TtftWindows:
    """Per pool, node and source, the TTFT deltas; the pool's quantile over any recent window."""

    def __init__(self, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.retention_ms = retention_ms
        self._nodes: dict[tuple[str, str, str], NodeWindow] = {}

    def observe(
        self, pool: str, node_id: str, at_ms: int, reading: Buckets, source: str = ENGINE
    ) -> bool:
        window = self._nodes.get((pool, node_id, source))
        if window is None:
            window = self._nodes[(pool, node_id, source)] = NodeWindow(self.retention_ms)
        return window.observe(at_ms, reading)

    def add(self, pool: str, node_id: str, at_ms: int, step: Buckets, source: str) -> None:
        """Observations new at ``at_ms`` (a delta, not a cumulative reading): the routers'."""
        window = self._nodes.get((pool, node_id, source))
        if window is None:
            window = self._nodes[(pool, node_id, source)] = NodeWindow(self.retention_ms)
        window.add(at_ms, step)

    def forget(self, pool: str, keep: Sequence[str]) -> None:
        """Drop the windows of nodes of ``pool`` not in ``keep`` (removed nodes)."""
        for key in [k for k in self._nodes if k[0] == pool and k[1] not in keep]:
            del self._nodes[key]

    def resets(self, pool: str) -> int:
        return sum(w.resets for (p, _, _), w in self._nodes.items() if p == pool)

    def quantile(self, pool: str, q: float, start_ms: int, end_ms: int) -> WindowQuantile:
        engine_nodes = {n for (p, n, s) in self._nodes if p == pool and s == ENGINE}
        parts: list[Buckets] = []
        nodes: set[str] = set()
        sources: set[str] = set()
        for (p, node, source), window in self._nodes.items():
            if p != pool or (source != ENGINE and node in engine_nodes):
                continue
            found = window.between(start_ms, end_ms)
            if found:
                nodes.add(node)
                sources.add(ENGINES if source == ENGINE else ROUTERS)
                parts += found
        merged = merge(parts)
        named = " and ".join(s for s in (ENGINES, ROUTERS) if s in sources)
        return WindowQuantile(quantile(q, merged), merged.total, len(nodes), named)
