"""Statistics of request streams: the numbers PAPER.md Table 6 and the trace README quote.

Everything here reads only ``SimRequest`` fields, so it applies to every workload and to traces.
Hit rates are *ideal* (infinite cache) and token-weighted like the paper's KV hit: a request's hit
is its longest leading run of blocks already present, counted in tokens (the last, partial block
counts its real size). Three scopes bound what routing can achieve:

* ``global``: one cache that has seen every earlier request (the upper bound for any router);
* ``key``: one cache per key that has seen only that key's earlier requests (perfect affinity);
* ``cross``: one cache per key that has seen only *other* keys' requests: the reuse a cache-blind
  balancer keeps when a large fleet dilutes each key's own prefixes (shared templates only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from sim.types import BLOCK_TOKENS, SimRequest

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
SCOPES = ("global", "key", "cross")


class StatsError(ValueError):
    """A statistic asked of a stream that cannot give it (empty stream, unknown scope)."""


def gini(weights: npt.ArrayLike) -> float:
    """Gini coefficient of non-negative weights (0 = all equal, → 1 = one holds everything)."""
    w = np.sort(np.asarray(weights, dtype=np.float64))
    n = len(w)
    cum = np.cumsum(w)
    return float((n + 1 - 2 * cum.sum() / cum[-1]) / n)


def top_share(weights: npt.ArrayLike, fraction: float) -> float:
    """Share of the total held by the largest ``round(fraction * n)`` (at least one) weights."""
    w = np.sort(np.asarray(weights, dtype=np.float64))[::-1]
    k = max(1, round(fraction * len(w)))
    return float(w[:k].sum() / w.sum())


def key_counts(requests: Sequence[SimRequest]) -> dict[str, int]:
    """Requests per key."""
    counts: dict[str, int] = {}
    for r in requests:
        counts[r.key] = counts.get(r.key, 0) + 1
    return counts


@dataclass(frozen=True)
class ThreadStats:
    """Conversation threads as seen in the stream (a thread cut by the window counts as cut)."""

    threads: int
    mean_requests: float  # requests per thread
    multi_turn_share: float  # share of requests whose thread has >= 2 requests in the stream


def thread_stats(requests: Sequence[SimRequest]) -> ThreadStats:
    """Thread sizes by ``SimRequest.thread`` (requests with thread < 0 are one-request threads)."""
    if not requests:
        raise StatsError("thread_stats of an empty stream")
    ids = np.array([r.thread for r in requests], dtype=np.int64)
    named = ids[ids >= 0]
    _, sizes = np.unique(named, return_counts=True)
    singles = int((ids < 0).sum())
    threads = len(sizes) + singles
    multi = int(sizes[sizes >= 2].sum())
    return ThreadStats(threads, len(requests) / threads, multi / len(requests))


def key_interarrival_cv(requests: Sequence[SimRequest], min_requests: int = 5) -> F64:
    """Per key with >= ``min_requests`` requests: CV (sample std, ddof 1, / mean) of its gaps."""
    keys = np.array([r.key_hash for r in requests], dtype=np.uint64)
    times = np.array([r.arrival_s for r in requests], dtype=np.float64)
    order = np.lexsort((times, keys))
    keys, times = keys[order], times[order]
    start = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    size = np.diff(np.append(start, len(keys)))
    cvs = []
    for a, n in zip(start.tolist(), size.tolist(), strict=True):
        if n >= min_requests:
            gaps = np.diff(times[a : a + n])
            mean = gaps.mean()
            cvs.append(gaps.std(ddof=1) / mean if mean > 0 else 0.0)
    return np.array(cvs, dtype=np.float64)


def _flat_blocks(
    requests: Sequence[SimRequest], outputs: bool = False
) -> tuple[npt.NDArray[np.uint64], I64, I64]:
    """Every request's prompt blocks, then (with ``outputs``) its output blocks, in order."""
    sizes = np.fromiter((len(r.blocks) for r in requests), dtype=np.int64, count=len(requests))
    extra = np.fromiter(
        (len(r.output_blocks) if outputs else 0 for r in requests), np.int64, len(requests)
    )
    total = int(sizes.sum() + extra.sum())
    parts = (r.blocks + r.output_blocks if outputs else r.blocks for r in requests)
    flat = np.fromiter(chain.from_iterable(parts), np.uint64, total)
    return flat, sizes, extra


def hit_blocks(requests: Sequence[SimRequest], scope: str = "global", outputs: bool = False) -> I64:
    """Per request: leading blocks already present in the ``scope`` cache (module docstring).

    With ``outputs`` an earlier request's generated blocks (``output_blocks``) are in the cache
    too, as in an engine that caches generated tokens (assuming it finished before the later
    request arrived).
    """
    if scope not in SCOPES:
        raise StatsError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    flat, sizes, extra = _flat_blocks(requests, outputs)
    n = len(requests)
    req = np.repeat(np.arange(n), sizes + extra)
    key_of = np.unique([r.key_hash for r in requests], return_inverse=True)[1].astype(np.int64)
    key = key_of[req]
    ident = flat
    if scope == "key":  # the same block under another key is a different cache entry
        ident = flat ^ (key.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    order = np.argsort(ident, kind="stable")  # stable: arrival order within each block id
    sid, sreq, skey = ident[order], req[order], key[order]
    new_group = np.concatenate(([True], sid[1:] != sid[:-1]))
    group = np.cumsum(new_group) - 1
    first = np.flatnonzero(new_group)
    if scope in ("global", "key"):
        seen = sreq > sreq[first][group]
    else:
        k0 = skey[first][group]
        other = skey != k0
        big = np.iinfo(np.int64).max
        r1 = np.minimum.reduceat(np.where(other, sreq, big), first)[group]
        seen = np.where(other, sreq > sreq[first][group], sreq > r1)
    hit_all = np.empty(len(flat), dtype=bool)
    hit_all[order] = seen
    width = sizes + extra  # keep the prompt entries only
    within = np.arange(len(flat)) - np.repeat(np.cumsum(width) - width, width)
    hit = hit_all[within < np.repeat(sizes, width)]
    # Leading run: index of the first miss within each request (its size when all hit).
    starts = np.cumsum(sizes) - sizes
    local = np.arange(len(hit)) - np.repeat(starts, sizes)
    miss_at = np.where(hit, np.repeat(sizes, sizes), local)
    run = np.full(n, 0, dtype=np.int64)
    nonempty = sizes > 0
    run[nonempty] = np.minimum.reduceat(miss_at, starts[nonempty])
    return run


def ideal_hit(
    requests: Sequence[SimRequest], scope: str = "global", outputs: bool = False
) -> float:
    """Token-weighted ideal hit rate in ``scope`` (cached prompt tokens / prompt tokens)."""
    if not requests:
        raise StatsError("ideal_hit of an empty stream")
    run = hit_blocks(requests, scope, outputs)
    tokens = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
    return float(np.minimum(run * BLOCK_TOKENS, tokens).sum() / tokens.sum())


def consecutive_common_blocks(requests: Sequence[SimRequest]) -> I64:
    """For each pair of consecutive requests of the same key: their common leading blocks."""
    last: dict[str, tuple[int, ...]] = {}
    common: list[int] = []
    for r in requests:
        prev = last.get(r.key)
        if prev is not None:
            n = 0
            for a, b in zip(prev, r.blocks, strict=False):
                if a != b:
                    break
                n += 1
            common.append(n)
        last[r.key] = r.blocks
    return np.array(common, dtype=np.int64)


def key_rates(requests: Sequence[SimRequest], duration_s: float) -> dict[str, float]:
    """Observed requests per second of each key over a window of ``duration_s``."""
    return {k: c / duration_s for k, c in key_counts(requests).items()}
