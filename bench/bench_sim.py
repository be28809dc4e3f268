"""Simulator speed: CPU seconds and events/s of one steady-state run per policy.

One (seed, QPS) stream of the frozen ``paper`` workload on ``paper-testbed`` (30 destinations,
the convergence check's pre-warm, 30 s warm-up + 120 s measured, abort at 5 s as the capacity
study runs it) is generated once; each policy then runs on it ``--repeat`` times and the
fastest CPU time (``time.process_time``: the machine is shared, wall time is not this process's)
is reported. Events are arrivals + node steps + snapshot ticks of the simulated part;
"replayed" counts the pre-warm requests routed and cached without the engine. ``digest`` is a
hash of the run's full metrics, so two source trees can be checked for identical results.
Prints a table, asserts nothing. Before/after: run the same script against the baseline tree
(``PYTHONPATH=/tmp/base``, a ``git archive`` of the baseline with this script copied in).

    nice -n 10 .venv/bin/python bench/bench_sim.py [--qps 100] [--repeat 2] [--policies ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from sim.cluster import Cluster, ClusterConfig
from sim.engine_model import get_profile
from sim.planning import Stream, make_stream, placement_of, plan_for
from sim.presets import TABLE1_POLICIES, calibrated_paper_options
from sim.study import RunSettings, prewarm_for, sim_policy_params
from sim.workloads.paper import PaperWorkload


def one(policy: str, settings: RunSettings, stream: Stream, seed: int, repeat: int) -> list[str]:
    config = ClusterConfig(
        profile=settings.profile, nodes=settings.nodes, warmup_s=settings.warmup_s, seed=seed,
        timeout_s=settings.timeout_s, abort_above_s=settings.abort_above_s,
        policy_params=sim_policy_params(policy, settings.profile),
    )  # fmt: skip
    table = plan_for(placement_of(policy), stream, config.node_ids(), q_cap=settings.q_cap)
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        cluster = Cluster(stream.requests, policy, config, table, stream.prewarm)
        metrics = cluster.run()
        best = min(best, time.process_time() - started)
    events = len(stream.requests) + cluster.snapshots + sum(n._step for n in cluster.nodes)
    digest = hashlib.sha1(json.dumps(metrics.to_dict(), sort_keys=True).encode()).hexdigest()
    return [
        policy, f"{len(stream.prewarm):,}", f"{events:,}", f"{best:.2f}",
        f"{events / best:,.0f}", f"{100 * metrics.kv_hit:.1f}%", digest[:10],
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", default="paper-testbed")
    parser.add_argument("--policies", default=",".join(TABLE1_POLICIES))
    args = parser.parse_args()
    settings = RunSettings(
        profile=get_profile(args.profile), q_cap=3.055, duration_s=150.0, warmup_s=30.0,
        prewarm_s=None, abort_above_s=5.0,
    )  # fmt: skip
    workload = PaperWorkload(top_k=128, **calibrated_paper_options())
    started = time.process_time()
    prewarm = prewarm_for(workload, settings, args.qps)
    check_s = time.process_time() - started
    protocol = settings.protocol(prewarm)
    started = time.process_time()
    stream = make_stream(
        workload, qps=args.qps, duration_s=settings.duration_s, seed=args.seed,
        prior_window_s=settings.plan_window_s, prewarm_s=protocol.prewarm_s,
    )  # fmt: skip
    stream_s = time.process_time() - started
    print(f"{args.qps:g} QPS seed {args.seed}: convergence check {check_s:.2f} s CPU, stream "
          f"{stream_s:.2f} s CPU; {protocol.describe()}")  # fmt: skip
    rows = [one(p, settings, stream, args.seed, args.repeat) for p in args.policies.split(",")]
    head = ["policy", "replayed", "events", "CPU s", "events/s", "hit", "digest"]
    print(" | ".join(head))
    for row in rows:
        print(" | ".join(row))
    print(f"total CPU s: {sum(float(r[3]) for r in rows):.2f}")


if __name__ == "__main__":
    main()
