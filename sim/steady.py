"""Steady-state runs: warm caches and routing state by replaying the window before the run.

A cold run understates every cache: a conversation's follow-up comes minutes after its previous
turn, and a cache needs minutes of traffic to fill. Simulating those minutes with the engine is
the expensive way; this module does it cheaply:

* :func:`warm_cluster` replays the requests of the window just before the run through each
  router's real policy (so prefix-history policies learn it too; their load views see only the
  replay's own in-flight corrections, reset at every snapshot tick), then installs in each
  destination's cache what an LRU cache holds after that traffic: the ``capacity`` most recently
  used distinct blocks, head before tail, with each finished request's output blocks (exact for
  LRU given the routing; pinning, reservations and queueing during the replay are not modelled,
  the simulated warm-up that follows settles those).
* :func:`converged_prewarm_s` derives how long that window must be from the workload, by a
  convergence check: a cold fleet of the profile's caches is fed the workload with cache-blind
  (uniform random) routing, the slowest policy to warm, and the served hit rate is tracked per
  ``bucket_s`` over a horizon of max(48,000 requests, 10 buckets), at most 2,400 s; the cache
  is warm from the first bucket whose 3-bucket mean is within ``tol`` (1 point) of the plateau
  (the last third's mean), see :func:`warm_time`. The pre-warm window is 1.5 × that time,
  rounded up to a bucket, at least one bucket.

The run protocol (:class:`Protocol`) is printed with every result.
"""

from __future__ import annotations

import math
import random
import typing
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import chain
from typing import Any

from sim.cluster_types import ClusterConfig, SimRouter
from sim.node import Node
from sim.tree_sync import TreeSync
from sim.types import BLOCK_TOKENS, SimRequest, Workload

BUCKET_S = 30.0
TOLERANCE = 0.01
MIN_BUCKETS = 10
MAX_CHECK_S = 2400.0
MAX_CHECK_REQUESTS = 48_000
SAFETY = 1.5


@dataclass(frozen=True)
class Protocol:
    """How a run was warmed and measured (seconds)."""

    prewarm_s: float  # replayed into caches and policies, no engine
    warmup_s: float  # simulated with the engine, not measured
    measure_s: float  # simulated and measured
    plan_window_s: float  # the plan's rates come from this window before the run
    warm_at_s: float | None = None  # convergence check: when a cold cache-blind fleet was warm
    converged: bool | None = None  # whether the check saw a plateau inside its horizon

    def describe(self) -> str:
        check = ""
        if self.warm_at_s is not None:
            state = "converged" if self.converged else "NOT converged"
            check = f" (cold cache-blind fleet warm after {self.warm_at_s:g} s, {state})"
        return (
            f"protocol: pre-warm {self.prewarm_s:g} s replayed{check}, warm-up {self.warmup_s:g} s"
            f" simulated, {self.measure_s:g} s measured; plan from the {self.plan_window_s:g} s"
            " before the run"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Convergence:
    warm_at_s: float
    prewarm_s: float
    converged: bool
    hit_by_bucket: tuple[float, ...]


class LruBlocks:
    """An LRU block set (the convergence check's cache: no pinning, no reservations)."""

    __slots__ = ("capacity", "order")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[int, None] = OrderedDict()

    def serve(self, blocks: Sequence[int], outputs: Sequence[int]) -> int:
        """Leading cached blocks of ``blocks``; then the request's blocks become most recent."""
        order = self.order
        hit = 0
        for block in blocks:
            if block not in order:
                break
            hit += 1
        move = order.move_to_end
        for block in (*reversed(outputs), *reversed(blocks)):  # head most recent, tail oldest
            if block in order:
                move(block)
            else:
                order[block] = None
        while len(order) > self.capacity:
            order.popitem(last=False)
        return hit


def hit_curve(
    requests: Sequence[SimRequest],
    *,
    nodes: int,
    kv_blocks: int,
    cache_outputs: bool,
    bucket_s: float = BUCKET_S,
    seed: int = 0,
) -> list[float]:
    """Token-weighted hit rate per ``bucket_s`` of a cold fleet under uniform random routing."""
    rng = random.Random(seed)
    caches = [LruBlocks(kv_blocks) for _ in range(nodes)]
    cached: list[int] = []
    prompt: list[int] = []
    for r in requests:
        b = int(r.arrival_s // bucket_s)
        while len(prompt) <= b:
            cached.append(0)
            prompt.append(0)
        hit = caches[rng.randrange(nodes)].serve(r.blocks, r.output_blocks if cache_outputs else ())
        cached[b] += min(hit * BLOCK_TOKENS, r.prompt_tokens - 1)
        prompt[b] += r.prompt_tokens
    return [c / p if p else 0.0 for c, p in zip(cached, prompt, strict=True)]


def warm_time(curve: Sequence[float], bucket_s: float, tol: float) -> tuple[float, bool]:
    """(start of the first 3-bucket mean within ``tol`` of the plateau, converged?).

    The plateau is the mean of the last third of the full buckets (the last bucket may be
    partial and is dropped); converged means the middle third's mean is within ``tol`` of it
    too, i.e. the curve had stopped rising inside the horizon. Means over 3 buckets keep the
    per-bucket noise of low rates from moving the answer.
    """
    full = list(curve[:-1])
    if len(full) < 6:
        return bucket_s * len(full), False
    third = len(full) // 3
    plateau = sum(full[-third:]) / third
    middle = sum(full[-2 * third : -third]) / third
    start = len(full) - 3
    for i in range(len(full) - 2):
        if sum(full[i : i + 3]) / 3 >= plateau - tol:
            start = i
            break
    return bucket_s * start, abs(plateau - middle) <= tol


def converged_prewarm_s(
    workload: Workload,
    *,
    qps: float,
    nodes: int,
    kv_blocks: int,
    cache_outputs: bool = True,
    tol: float = TOLERANCE,
    bucket_s: float = BUCKET_S,
    seed: int = 0,
) -> Convergence:
    """How long a pre-warm window this workload needs at ``qps`` (module docstring)."""
    horizon = min(MAX_CHECK_S, max(MIN_BUCKETS * bucket_s, MAX_CHECK_REQUESTS / qps))
    requests = workload.requests(qps=qps, duration_s=horizon, seed=seed)
    curve = hit_curve(
        requests, nodes=nodes, kv_blocks=kv_blocks, cache_outputs=cache_outputs, bucket_s=bucket_s
    )
    warm_at, converged = warm_time(curve, bucket_s, tol)
    prewarm = max(bucket_s, math.ceil(SAFETY * warm_at / bucket_s) * bucket_s)
    return Convergence(warm_at, prewarm, converged, tuple(curve))


_MEMO: dict[tuple[int, float, int, int, bool], tuple[Workload, Convergence]] = {}


def cached_prewarm(
    workload: Workload, *, qps: float, nodes: int, kv_blocks: int, cache_outputs: bool
) -> Convergence:
    """:func:`converged_prewarm_s` once per (workload object, QPS, fleet) in this process.

    A study fills this before forking its workers, so they inherit the results.
    """
    key = (id(workload), float(qps), nodes, kv_blocks, cache_outputs)
    hit = _MEMO.get(key)
    if hit is None or hit[0] is not workload:
        result = converged_prewarm_s(
            workload, qps=qps, nodes=nodes, kv_blocks=kv_blocks, cache_outputs=cache_outputs
        )
        _MEMO[key] = (workload, result)
        return result
    return hit[1]


def remember(
    workload: Workload, qps: float, nodes: int, kv_blocks: int, cache_outputs: bool,
    result: Convergence,
) -> None:  # fmt: skip
    """Store a result computed elsewhere (a worker process) for :func:`cached_prewarm`."""
    _MEMO[(id(workload), float(qps), nodes, kv_blocks, cache_outputs)] = (workload, result)


class WarmableCluster(typing.Protocol):
    """What warm-up drives of a cluster (:class:`sim.cluster.Cluster` is one)."""

    config: ClusterConfig
    routers: list[SimRouter]
    nodes: list[Node]
    sync: TreeSync | None

    def route(self, i: int, request: SimRequest, now: float) -> int: ...


def warm_cluster(cluster: WarmableCluster, prewarm: Sequence[SimRequest]) -> None:
    """Replay ``prewarm`` (times < 0) through the routers and install the LRU caches it leaves."""
    if not prewarm:
        return
    routers = cluster.routers
    interval = cluster.config.snapshot_interval_s
    zeros = [0] * len(cluster.nodes)
    per_node: list[list[int]] = [[] for _ in cluster.nodes]
    next_snap = prewarm[0].arrival_s
    for i, request in enumerate(prewarm):
        now = request.arrival_s
        if now >= next_snap:
            for router in routers:
                router.view.apply_snapshot(now, zeros)
            next_snap = now + interval
        per_node[cluster.route(i, request, now)].append(i)
        if cluster.sync is not None:
            cluster.sync.tick(now)
    outputs = cluster.config.cache_outputs
    for node, indices in zip(cluster.nodes, per_node, strict=True):
        node.cache.warm(_recent_first(prewarm, indices[::-1], node.cache.capacity, outputs))


def _recent_first(
    requests: Sequence[SimRequest], newest_first: Sequence[int], capacity: int, outputs: bool
) -> list[int]:
    """Distinct blocks by last use, most recent first, until ``capacity`` are known.

    Chunks of requests go through ``dict.fromkeys`` (C speed); ``update`` keeps a block's first,
    i.e. most recent, position. The list may overshoot ``capacity``; ``warm`` cuts it.
    """
    seen: dict[int, None] = {}
    step = 256
    for lo in range(0, len(newest_first), step):
        chunk = [requests[i] for i in newest_first[lo : lo + step]]
        if outputs:
            parts = chain.from_iterable(r.blocks + r.output_blocks for r in chunk)
        else:
            parts = chain.from_iterable(r.blocks for r in chunk)
        seen.update(dict.fromkeys(parts))
        if len(seen) >= capacity:
            break
    return list(seen)
