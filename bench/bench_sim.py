"""Simulator speed: wall time and events/s of one steady-state (seed, QPS) task per policy.

The baseline in the same run is the old cold protocol (no pre-warm, 75 s = 15 s + 60 s). Events
are arrivals + node steps + snapshot ticks of the simulated run; the pre-warm replay is counted
as its requests (routed and cached, no engine). Prints a table, asserts nothing.

    nice -n 10 .venv/bin/python bench/bench_sim.py [--qps 100] [--profile paper-testbed]
"""

from __future__ import annotations

import argparse
import time

from sim.cluster import Cluster, ClusterConfig
from sim.engine_model import get_profile
from sim.planning import make_stream, placement_of, plan_for
from sim.presets import calibrated_paper_options
from sim.study import RunSettings, prewarm_for, sim_policy_params
from sim.workloads.paper import PaperWorkload


def one(policy: str, settings: RunSettings, qps: float, seed: int, label: str) -> list[object]:
    workload = PaperWorkload(top_k=128, **calibrated_paper_options())
    prewarm = prewarm_for(workload, settings, qps)
    protocol = settings.protocol(prewarm)
    stream = make_stream(
        workload, qps=qps, duration_s=settings.duration_s, seed=seed,
        prior_window_s=settings.plan_window_s, prewarm_s=protocol.prewarm_s,
    )  # fmt: skip
    config = ClusterConfig(
        profile=settings.profile, nodes=30, warmup_s=settings.warmup_s, seed=seed,
        policy_params=sim_policy_params(policy, settings.profile),
    )  # fmt: skip
    table = plan_for(placement_of(policy), stream, config.node_ids(), q_cap=settings.q_cap)
    started = time.perf_counter()
    cluster = Cluster(stream.requests, policy, config, table, stream.prewarm)
    metrics = cluster.run()
    wall = time.perf_counter() - started
    events = len(stream.requests) + cluster.snapshots + sum(n._step for n in cluster.nodes)
    return [
        label, policy, f"{protocol.prewarm_s:g}+{settings.duration_s:g}", len(stream.prewarm),
        events, f"{wall:.2f}", f"{events / wall:,.0f}", f"{100 * metrics.kv_hit:.1f}%",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--profile", default="paper-testbed")
    parser.add_argument("--policies", default="flat,cacheroute,preble,sglang")
    args = parser.parse_args()
    profile = get_profile(args.profile)
    steady = RunSettings(profile=profile, q_cap=3.0, duration_s=150.0, warmup_s=30.0,
                         prewarm_s=None)  # fmt: skip
    cold = RunSettings(profile=profile, q_cap=3.0, duration_s=75.0, warmup_s=15.0, prewarm_s=0.0)
    rows = []
    for policy in args.policies.split(","):
        rows.append(one(policy, cold, args.qps, args.seed, "cold (old)"))
        rows.append(one(policy, steady, args.qps, args.seed, "steady"))
    head = ["protocol", "policy", "prewarm+sim s", "replayed", "events", "wall s", "events/s",
            "hit"]  # fmt: skip
    print(" | ".join(head))
    for row in rows:
        print(" | ".join(str(x) for x in row))


if __name__ == "__main__":
    main()
