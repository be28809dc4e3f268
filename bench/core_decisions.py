"""``bench_core.py``'s decision benchmark: one ``cacheroute`` decision per call, timed per call.

Times ``policy.choose`` + ``view.record`` (what the router does per request) on a planned and a
stress table, against a dict of node ids and ``min()`` over a dict of loads.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from core_workload import PAPER_KEYS, Q_CAP, U64, workload

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies import Request, make_policy
from dataplane.core.table import PlannerParams, RoutingTable, make_table


def decision_table(hashes: U64, sets: list[list[int]], nodes: list[str]) -> RoutingTable:
    order = np.argsort(hashes)
    sizes = np.array([len(sets[i]) for i in order], dtype=np.uint32)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint32)
    members = np.array([m for i in order for m in sets[i]], dtype=np.uint16)
    return make_table(
        pool="default",
        node_ids=nodes,
        key_hashes=hashes[order],
        set_offsets=offsets,
        set_members=members,
        params=PlannerParams(q_cap=Q_CAP, slots_per_node=0),
        created_at_unix_ms=0,
    )


def time_decisions(
    decide: Callable[[int, float], object], keys: list[int], snapshot: Callable[[float], None]
) -> list[int]:
    """Per-call ns of ``decide(key_hash, now)`` at 10k req/s, with a load snapshot every 250 ms."""
    clock = time.perf_counter_ns
    samples = []
    for i, key in enumerate(keys):
        now = i * 1e-4
        if i % 2500 == 0:
            snapshot(now)
        started = clock()
        decide(key, now)
        samples.append(clock() - started)
    return samples


def summarise(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples[10_000:])  # the first 10,000 calls are warm-up
    return {"median_ns": ordered[len(ordered) // 2], "p99_ns": ordered[int(len(ordered) * 0.99)]}


def decisions_fast(table: RoutingTable, nodes: list[str], stream: list[int]) -> dict[str, float]:
    """What the router does per request: choose, then count the decision in the view."""
    view = LoadView(NodeSet(nodes), table=table)
    policy = make_policy("cacheroute", seed=1)
    snap_rng = random.Random(6)

    def decide(key: int, now: float) -> None:
        decision = policy.choose(Request(key), view)
        view.record(decision.node, now)

    def snapshot(now: float) -> None:
        view.apply_snapshot(now - 0.05, [snap_rng.randint(0, 20) for _ in nodes])

    return summarise(time_decisions(decide, stream, snapshot))


def decisions_reference(
    table: RoutingTable, nodes: list[str], stream: list[int]
) -> dict[str, float]:
    """The obvious way: a dict key hash -> node ids, min() over a dict of loads."""
    sets = {int(h): [nodes[m] for m in table.members(i)] for i, h in enumerate(table.key_hashes)}
    loads = dict.fromkeys(nodes, 0.0)
    rng, snap_rng = random.Random(1), random.Random(6)

    def decide(key: int, now: float) -> None:
        members = sets.get(key)
        if members is None:
            a, b = rng.sample(nodes, 2)
            node = a if loads[a] <= loads[b] else b
        else:
            node = min(members, key=loads.__getitem__)
        loads[node] += 1.0

    def snapshot(now: float) -> None:
        for node in nodes:
            loads[node] = float(snap_rng.randint(0, 20))

    return summarise(time_decisions(decide, stream, snapshot))


def bench_decision(quick: bool) -> dict[str, Any]:
    hashes, rates, _ = workload(PAPER_KEYS, 30, seed=3)
    nodes = [f"node-{i}" for i in range(30)]
    planned = build_plan(PlanInput(hashes, rates, nodes, Q_CAP, 5000))  # every key warm
    assert planned.num_keys == PAPER_KEYS
    rng = random.Random(3)
    stress = decision_table(
        hashes, [sorted(rng.sample(range(30), 4)) for _ in range(PAPER_KEYS)], nodes
    )
    count = 100_000 if quick else 300_000
    warm = np.random.default_rng(4).choice(hashes, size=count + 10_000, p=rates / rates.sum())
    cold = np.random.default_rng(5).integers(0, 2**63, size=count + 10_000, dtype=np.uint64)
    cases = [
        ("planned (every key warm)", planned, "rate-weighted keys", warm.tolist()),
        ("planned (every key warm)", planned, "keys not in the table", cold.tolist()),
        ("stress (every key on 4 nodes)", stress, "rate-weighted keys", warm.tolist()),
    ]
    clock = time.perf_counter_ns
    overhead = statistics.median(-clock() + clock() for _ in range(100_000))
    rows = [
        {
            "table": label,
            "keys": kind,
            "fast": decisions_fast(table, nodes, stream),
            "ref": decisions_reference(table, nodes, stream),
        }
        for label, table, kind, stream in cases
    ]
    return {"timer_overhead_ns": overhead, "decisions": count, "rows": rows}
