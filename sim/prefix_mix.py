"""Equal-slot vs byte-aware admission in the simulator, on keys with different prefix sizes.

**Workload** (``mixed_prefix_requests``): single-turn requests ``template | business context |
unique body`` (the ``lowshare``/``tenants`` shape) over the paper's top-``top_k`` keys, where each
key's context has one of ``context_tokens`` sizes (key i gets size class i mod len(sizes), so
every size class spans the popularity range). Body: lognormal, median 200 tokens, σ 0.6.

**Plans** from the same prior window: Algorithm 1 with W equal slots per destination, and
byte-aware admission (:mod:`controlplane.core.byte_admission`) with each key's reusable prefix
(template + context, in tokens) against a per-destination budget of W × the mean prefix size of
the active keys, i.e. the same cache bytes as W average slots. Both run the ``cacheroute`` policy
on the same stream and cluster; the report gives token-weighted KV hit, the share of requests
served from a warm destination set, p99 TTFT and imbalance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.table import RoutingTable
from sim.cluster import ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.planning import estimate_rates, split_stream
from sim.types import SimRequest
from sim.workloads.arrivals import ArrivalProcess
from sim.workloads.popularity import Population, paper_active_set
from sim.workloads.single_turn import SingleTurnShape, single_turn_requests

TEMPLATE_TOKENS = 48
BODY = (200.0, 0.6, 16, 4096)
ARRIVALS = ArrivalProcess("poisson")


def size_of_key(index: int, sizes: Sequence[int]) -> int:
    return sizes[index % len(sizes)]


def mixed_prefix_requests(
    top_k: int, sizes: Sequence[int], *, qps: float, duration_s: float, seed: int
) -> list[SimRequest]:
    """The workload of the module docstring, by arrival."""
    active = paper_active_set(top_k)
    requests: list[SimRequest] = []
    for c, context in enumerate(sizes):
        members = [i for i in range(len(active)) if i % len(sizes) == c]
        w = np.asarray(active.weights)[members]
        share = float(w.sum())
        pop = Population(
            tuple(active.names[i] for i in members), tuple(active.hashes[i] for i in members),
            w / share,
        )  # fmt: skip
        shape = SingleTurnShape(0xB17E5 + c, TEMPLATE_TOKENS, context, BODY)
        requests += single_turn_requests(
            shape, pop, ARRIVALS, qps=qps * share, duration_s=duration_s, seed=seed * 31 + c
        )
    requests.sort(key=lambda r: r.arrival_s)
    return requests


@dataclass(frozen=True)
class MixSettings:
    profile: EngineProfile
    q_cap: float
    qps: float
    sizes: tuple[int, ...]
    top_k: int = 512
    nodes: int = 30
    slots_per_node: int = 8
    duration_s: float = 120.0
    plan_window_s: float = 60.0
    warmup_s: float = 30.0
    seed: int = 1
    byte_rank: str = "rate_per_byte"


def plans(stream_prior: list[SimRequest], s: MixSettings) -> dict[str, RoutingTable]:
    hashes, rates, labels = estimate_rates(stream_prior, s.plan_window_s)
    active = paper_active_set(s.top_k)
    size = {h: TEMPLATE_TOKENS + size_of_key(i, s.sizes) for i, h in enumerate(active.hashes)}
    prefix = np.array([size[int(h)] for h in hashes.tolist()], dtype=np.float64)
    mean_prefix = TEMPLATE_TOKENS + float(
        np.mean([size_of_key(i, s.sizes) for i in range(s.top_k)])
    )
    base = PlanInput(
        key_hashes=hashes, rates=rates, node_ids=[f"d{i:03d}" for i in range(s.nodes)],
        q_cap=s.q_cap, slots_per_node=s.slots_per_node, pool="sim", key_labels=labels,
    )  # fmt: skip
    byte_aware = PlanInput(
        key_hashes=hashes, rates=rates, node_ids=list(base.node_ids), q_cap=s.q_cap,
        slots_per_node=s.slots_per_node, pool="sim", key_labels=labels, prefix_sizes=prefix,
        cache_budget=s.slots_per_node * mean_prefix, byte_rank=s.byte_rank,
    )  # fmt: skip
    return {
        "equal_slots": build_plan(base, created_at_unix_ms=1),
        "byte_aware": build_plan(byte_aware, created_at_unix_ms=1),
    }


def compare_admission(s: MixSettings) -> dict[str, Any]:
    """Both admissions on one stream (see the module docstring)."""
    raw = mixed_prefix_requests(
        s.top_k, s.sizes, qps=s.qps, duration_s=s.plan_window_s + s.duration_s, seed=s.seed
    )
    stream = split_stream(raw, s.plan_window_s, s.duration_s)
    config = ClusterConfig(profile=s.profile, nodes=s.nodes, warmup_s=s.warmup_s, seed=s.seed)
    result: dict[str, Any] = {"sizes": list(s.sizes), "qps": s.qps, "top_k": s.top_k}
    measured = [r for r in stream.requests if r.arrival_s >= s.warmup_s]
    for name, table in plans(stream.prior, s).items():
        metrics = simulate(stream.requests, "cacheroute", config, table)
        warm = set(table.key_hashes.tolist())
        result[name] = {
            "admitted_keys": table.num_keys,
            "warm_request_share": sum(r.key_hash in warm for r in measured) / len(measured),
            "kv_hit": metrics.kv_hit,
            "p99_s": metrics.ttft_p99_s,
            "imbalance": metrics.imbalance,
            "planned_imbalance": table.stats.planned_imbalance,
        }
    return result
