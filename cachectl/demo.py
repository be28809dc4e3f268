"""``cachectl demo``: a whole CacheRoute cluster on this machine, Flat-LB first, then a plan.

1. Start the local cluster (:mod:`cachectl.localcluster`): an embedded Redis, the control plane,
   two routers running the paper's dispatch (``DEMO_POLICY``), eight simulated engines (one
   ``simengine`` process) and their agents (one ``agents`` process).
2. Phase 1, Flat-LB: no plan is active, so the routers fall back to power-of-two choices on load
   (decision reason ``no_table``). The load generator replays the workload through the routers'
   OpenAI-compatible HTTP fronts (round-robin; ``cachectl load --openai``): each router decides
   in process and streams the chosen engine's answer back; a warm-up is left out of the metrics.
3. Build a plan from the per-key rates the routers reported (``cachectl plan build``, live, via
   the PlanService), roll it out and wait until both routers ACK its generation.
4. Empty every engine's prefix cache, so phase 2 starts as cold as phase 1 did.
5. Phase 2, CacheRoute: the same requests at the same offered load (reasons ``warm``/``tail``).
6. Print both phases side by side; ``--json`` prints one object instead. Stop everything.

Every process the demo starts is stopped on exit, also on an error or Ctrl-C. Why the default
workload (``tenants``) and load: see :mod:`sim.workloads.tenants` and
docs/components/localcluster.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cachectl.demo_phases import run_demo, say
from cachectl.errors import CliError
from cachectl.loadgen.results import Summary
from cachectl.loadgen.workloads import NAMES, WorkloadError, parse_options, resolve
from cachectl.localcluster.cluster import LocalCluster
from cachectl.localcluster.processes import ProcessExitedError
from cachectl.localcluster.report import side_by_side
from cachectl.localcluster.spec import ClusterError, ClusterSpec
from cachectl.output import print_json
from cacheroute_state.embedded import EmbeddedRedisError
from sim.engine_model import LLAMA_70B, PROFILES
from sim.types import SimRequest

DEFAULT_DURATION_S = 70.0  # measured seconds over both phases: the demo takes ≈ 2 minutes
DEFAULT_WARMUP_S = 10.0
DEFAULT_QPS = 16.0
DEFAULT_WORKLOAD = "tenants"
# The demo measures a plan against Flat-LB on the same routers, so they run the paper's dispatch:
# with no plan it is power-of-two choices (Flat-LB), with one the plan's members. The routers'
# own default (cacheroute_balanced) keeps keys on their hash-ring home before any plan, which
# would make phase 1 cache-aware and the comparison meaningless; docs/results.md §7 compares it.
DEMO_POLICY = "cacheroute"
WHY = (
    "workload 'tenants': 128 businesses (the paper's popularity), each with a 6,144-token\n"
    "context in front of a short question, more prefix sharing than the paper's assistant.\n"
    "Their contexts (≈ 800K tokens) overflow one engine's KV cache (641K) but fit in eight:\n"
    "a regime where planned affinity pays. docs/results.md shows regimes where it does not."
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run a local cluster: Flat-LB, then a CacheRoute plan, side by side",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"measured load seconds, split over the two phases ({DEFAULT_DURATION_S:g})",
    )
    add("--warmup", type=float, default=DEFAULT_WARMUP_S, help="warm-up seconds per phase (10)")
    add("--qps", type=float, default=DEFAULT_QPS, help=f"offered load, req/s ({DEFAULT_QPS:g})")
    add("--workload", default=DEFAULT_WORKLOAD, help=f"{', '.join(NAMES)} ({DEFAULT_WORKLOAD})")
    add("--option", action="append", default=[], metavar="NAME=VALUE", help="workload option")
    add("--seed", type=int, default=1, help="workload seed (1)")
    add("--engines", type=int, default=8, help="simulated engines (8)")
    add("--routers", type=int, default=2, help="routers (2)")
    add("--profile", default=LLAMA_70B.name, choices=sorted(PROFILES), help="engine profile")
    add("--speedup", type=float, default=1.0, help="simulated seconds per wall second (1)")
    add("--json", action="store_true", help="print one JSON object (progress stays on stderr)")
    add(
        "--kv-events",
        action="store_true",
        help="engines publish KV-cache events, agents subscribe (cachectl status: residency)",
    )
    add("--keep-logs", type=Path, metavar="DIR", help="write the components' logs here and keep")
    add("--no-progress", action="store_true", help="no live progress line")
    parser.set_defaults(handler=_demo)


class _TerminatedError(Exception):
    """SIGTERM: unwind like Ctrl-C so that every started process is stopped."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError()


async def _interruptible(
    args: argparse.Namespace, cluster: LocalCluster, requests: list[SimRequest]
) -> dict[str, Any]:
    """``run_demo``, stopping the cluster's processes first when SIGINT or SIGTERM arrives.

    Killing the processes before unwinding makes every pending gRPC or HTTP call fail at once,
    so no task can hold up the shutdown waiting on a component that is already gone.
    """
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    received: list[int] = []

    def on_signal(sig: int) -> None:
        if not received:
            received.append(sig)
            cluster.stop()
            if main is not None:
                main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await run_demo(args, cluster, requests)
    except asyncio.CancelledError:
        if received:
            raise _TerminatedError() from None
        raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _check(args: argparse.Namespace) -> list[SimRequest]:
    if not args.duration > 0 or args.warmup < 0 or not args.qps > 0 or not args.speedup > 0:
        raise CliError("--duration, --qps and --speedup must be > 0 and --warmup >= 0")
    if args.engines < 1 or args.routers < 1:
        raise CliError("--engines and --routers must be >= 1")
    try:
        workload = resolve(args.workload, parse_options(args.option))
        phase_s = args.warmup + args.duration / 2
        return workload.requests(qps=args.qps, duration_s=phase_s, seed=args.seed)
    except (WorkloadError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _demo(args: argparse.Namespace) -> int:
    requests = _check(args)
    log_dir = args.keep_logs or Path(tempfile.mkdtemp(prefix="cacheroute-demo-"))
    spec = ClusterSpec(
        engines=args.engines, routers=args.routers, profile=args.profile, speedup=args.speedup,
        kv_events=args.kv_events, router_policy=DEMO_POLICY,
    )  # fmt: skip
    say(args, f"CacheRoute local demo: {args.engines} simulated engines ({args.profile}, "
              f"speed-up {args.speedup:g}), {args.routers} routers, control plane, agents, "
              "embedded Redis")  # fmt: skip
    say(args, f"{args.qps:g} req/s offered, {args.warmup:g} s warm-up + "
              f"{args.duration / 2:g} s measured per phase; logs in {log_dir}")  # fmt: skip
    if args.workload == DEFAULT_WORKLOAD:
        say(args, WHY)
    say(args)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    cluster = LocalCluster(spec, log_dir)
    started = time.monotonic()
    ok = False
    try:
        result = asyncio.run(_interruptible(args, cluster, requests))
        ok = True
    except (ClusterError, ProcessExitedError, EmbeddedRedisError, OSError) as exc:
        raise CliError(f"{exc} (logs kept in {log_dir})") from None
    except (KeyboardInterrupt, _TerminatedError):
        print(f"\ncachectl demo: interrupted; stopping the cluster (logs in {log_dir})",
              file=sys.stderr)  # fmt: skip
        return 130
    finally:
        t = time.monotonic()
        cluster.stop()
        stop_s = time.monotonic() - t
        signal.signal(signal.SIGTERM, previous)
        if ok and args.keep_logs is None:
            shutil.rmtree(log_dir, ignore_errors=True)
    result["timings"]["shutdown_s"] = stop_s
    result["timings"]["total_s"] = time.monotonic() - started
    flat, planned = result["flat"], result["cacheroute"]
    if args.json:
        print_json(_document(args, result, log_dir))
    else:
        print()
        print(side_by_side(flat, planned))
        print()
        total = result["timings"]["total_s"]
        kept = f"logs kept in {log_dir}" if args.keep_logs else "logs removed (--keep-logs DIR)"
        print(f"done in {total:.0f} s; every process stopped; {kept}")
    return 0


def _document(args: argparse.Namespace, result: dict[str, Any], log_dir: Path) -> dict[str, Any]:
    flat: Summary = result["flat"]
    planned: Summary = result["cacheroute"]
    return {
        "settings": {
            "workload": args.workload,
            "options": args.option,
            "qps": args.qps,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "seed": args.seed,
            "engines": args.engines,
            "routers": args.routers,
            "profile": args.profile,
            "speedup": args.speedup,
            "router_policy": DEMO_POLICY,
        },
        "phases": {"flat": flat.to_dict(), "cacheroute": planned.to_dict()},
        "plan": result["plan"],
        "improved": {
            "hit_rate": planned.hit_rate > flat.hit_rate,
            "ttft_p99": planned.ttft_p99_s < flat.ttft_p99_s,
        },
        "timings": result["timings"],
        "affinity": result["affinity"],
        "logs": str(log_dir) if args.keep_logs else None,
    }
