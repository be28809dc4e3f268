"""The demo's scenario on a started cluster: Flat-LB, a plan rolled out, then CacheRoute.

Apart from :mod:`cachectl.demo` (the command: flags, signals, output) so the steps the demo
measures read in order, without the process handling around them.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from cachectl.loadgen.affinity import Affinity, affinity_of, affinity_text
from cachectl.loadgen.openai_client import OpenAILoadClient
from cachectl.loadgen.progress import ProgressLine
from cachectl.loadgen.results import Summary, summarize
from cachectl.loadgen.runner import replay
from cachectl.localcluster.cluster import LocalCluster
from cachectl.localcluster.report import plan_dict, plan_lines
from cachectl.localcluster.spec import ClusterError
from sim.types import SimRequest

DRAIN_TIMEOUT_S = 30.0


def counts_text(counts: dict[str, int]) -> str:
    """Decision reasons, most frequent first."""
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def say(args: argparse.Namespace, text: str = "") -> None:
    """A line of the narration; silent with ``--json``."""
    if not args.json:
        print(text, flush=True)


async def run_phase(
    args: argparse.Namespace,
    cluster: LocalCluster,
    requests: list[SimRequest],
    label: str,
) -> tuple[Summary, Affinity]:
    """Replay ``requests`` through the routers' HTTP fronts; the phase's summary and affinity."""
    progress = None
    if not args.no_progress and ProgressLine.enabled():
        progress = ProgressLine(label, args.warmup + args.duration / 2, args.warmup)
    async with OpenAILoadClient(cluster.router_http_urls, pool=cluster.spec.pool) as client:
        outcomes = await replay(
            client,
            requests,
            warmup_s=args.warmup,
            drain_timeout_s=DRAIN_TIMEOUT_S,
            progress=progress,
        )
    cluster.check_alive()
    summary = summarize(outcomes, cluster.spec.node_ids())
    if summary.completed == 0:
        raise ClusterError(f"{label}: no request completed; logs in {cluster.log_dir}")
    return summary, affinity_of(outcomes, requests, cluster.spec.node_ids())


async def run_demo(
    args: argparse.Namespace, cluster: LocalCluster, requests: list[SimRequest]
) -> dict[str, Any]:
    """Start the cluster, run Flat-LB, build and roll out a plan, run CacheRoute (steps 1-5)."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    cluster.start()
    ready_s = await cluster.wait_ready()
    timings["startup_s"] = time.monotonic() - started
    say(args, f"cluster ready in {ready_s:.1f} s: routers {', '.join(cluster.router_addresses)} "
              f"(HTTP fronts {', '.join(cluster.router_http_urls)}), "
              f"control plane {cluster.controlplane_address}")  # fmt: skip
    say(args)
    say(args, "phase 1/2: Flat-LB. No plan is active: routers use power-of-two choices.")
    t = time.monotonic()
    flat, flat_affinity = await run_phase(args, cluster, requests, "flat-lb")
    timings["phase1_s"] = time.monotonic() - t
    say(args, f"  hit {flat.hit_rate:.1%}, TTFT p50 {flat.ttft_p50_s:.3f} s, "
              f"p99 {flat.ttft_p99_s:.3f} s; decisions {counts_text(flat.reasons)}")  # fmt: skip
    say(args, affinity_text(flat_affinity))
    say(args)
    say(args, "building a plan from the rates the routers reported, rolling it out ...")
    t = time.monotonic()
    built = await cluster.build_plan(note=f"cachectl demo, {args.qps:g} req/s {args.workload}")
    # Past the shadow gate only: the demo measures the plan against Flat-LB itself (phase 2).
    pointer = await cluster.rollout(
        built.metadata.version,
        skip_gates=("shadow",),
        reason="local demo: phase 2 measures the plan against Flat-LB itself",
    )
    acks = await cluster.wait_acks(pointer.generation)
    plan = plan_dict(built, pointer.generation, sorted(a.router_id for a in acks))
    await cluster.reset_caches()
    timings["plan_s"] = time.monotonic() - t
    for line in plan_lines(plan):
        say(args, line)
    say(args, "  engine prefix caches emptied")
    say(args)
    say(args, "phase 2/2: CacheRoute. The same requests at the same offered load.")
    t = time.monotonic()
    planned, planned_affinity = await run_phase(args, cluster, requests, "cacheroute")
    timings["phase2_s"] = time.monotonic() - t
    say(args, f"  hit {planned.hit_rate:.1%}, TTFT p50 {planned.ttft_p50_s:.3f} s, "
              f"p99 {planned.ttft_p99_s:.3f} s; "
              f"decisions {counts_text(planned.reasons)}")  # fmt: skip
    say(args, affinity_text(planned_affinity))
    return {
        "flat": flat,
        "cacheroute": planned,
        "plan": plan,
        "timings": timings,
        "affinity": {"flat": flat_affinity.to_dict(), "cacheroute": planned_affinity.to_dict()},
    }
