"""Time one routing decision (choose + observe) per policy; prints a table, asserts nothing.

Setup: 30 nodes; a 128-key CacheRoute table (LPT plan over Zipf-ish rates); requests over 256
keys (half of them warm, Zipf-ish popularity), each key with 4 conversation threads of 75 prefix
blocks, a request taking a thread's first 20-75 blocks; a fresh random load snapshot every 100
decisions, and every decision counted in the view's in-flight correction (outside the timing).

    .venv/bin/python bench/bench_policies.py [--decisions 100000] [--nodes 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import Counter

import numpy as np

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies.base import Request
from dataplane.core.policies.registry import POLICIES, make_policy
from dataplane.core.table import RoutingTable

KEYS = 256
WARM_KEYS = 128
THREADS = 4
BLOCKS = 75
SNAPSHOT_EVERY = 100


def make_table(nodes: NodeSet, key_hashes: list[int]) -> RoutingTable:
    rates = np.array([100.0 / (rank + 1) ** 0.8 for rank in range(WARM_KEYS)])
    return build_plan(
        PlanInput(
            key_hashes=np.array(key_hashes[:WARM_KEYS], dtype=np.uint64),
            rates=rates,
            node_ids=nodes.ids,
            q_cap=float(rates.sum()) / len(nodes) / 2,
            slots_per_node=16,
        ),
        created_at_unix_ms=0,
    )


def make_requests(key_hashes: list[int], count: int, rng: random.Random) -> list[Request]:
    threads = [
        [tuple(rng.getrandbits(64) for _ in range(BLOCKS)) for _ in range(THREADS)]
        for _ in key_hashes
    ]
    for per_key in threads:  # a key's threads share its first 12 blocks (template + context)
        shared = per_key[0][:12]
        per_key[1:] = [shared + thread[12:] for thread in per_key[1:]]
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(key_hashes))]
    picks = rng.choices(range(len(key_hashes)), weights=weights, k=count)
    return [
        Request(key_hashes[k], threads[k][rng.randrange(THREADS)][: rng.randint(20, BLOCKS)])
        for k in picks
    ]


def bench(
    name: str, nodes: NodeSet, table: RoutingTable, requests: list[Request], seed: int
) -> tuple[float, float, str]:
    """Median and p99 µs of choose + observe, and the three commonest reasons."""
    policy = make_policy(name, seed=seed)
    view = LoadView(nodes, table=table)
    load_rng = random.Random(seed)
    samples: list[int] = []
    reasons: Counter[str] = Counter()
    clock = time.perf_counter_ns
    for i, request in enumerate(requests):
        now = i * 0.001
        if i % SNAPSHOT_EVERY == 0:
            view.apply_snapshot(now, [float(load_rng.randrange(0, 30)) for _ in range(len(nodes))])
        start = clock()
        decision = policy.choose(request, view)
        policy.observe(request, decision, view)
        samples.append(clock() - start)
        view.record(decision.node, now)
        reasons[decision.reason.value] += 1
    samples.sort()
    median = statistics.median(samples) / 1000
    p99 = samples[int(len(samples) * 0.99)] / 1000
    mix = ", ".join(f"{r} {n / len(requests):.0%}" for r, n in reasons.most_common(3))
    return median, p99, mix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nodes = NodeSet([f"node-{i}" for i in range(args.nodes)])
    key_hashes = [hash_key(f"tenant-{i}") for i in range(KEYS)]
    table = make_table(nodes, key_hashes)
    requests = make_requests(key_hashes, args.decisions, rng)
    print(
        f"{args.decisions:,} decisions per policy, {args.nodes} nodes, {table.num_keys} warm keys"
    )
    print(f"{'policy':<18}{'median µs':>10}{'p99 µs':>10}  top reasons")
    for name in POLICIES:
        median, p99, mix = bench(name, nodes, table, requests, args.seed)
        print(f"{name:<18}{median:>10.2f}{p99:>10.2f}  {mix}")


if __name__ == "__main__":
    main()
