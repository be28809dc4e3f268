"""``cachectl sim drift | shadow``: the plan-lifecycle experiments of issue 11.

* ``drift``: fresh vs churn-aware replanning under the paper's drift model (:mod:`sim.drift`);
  per transition, for both replanners: churn, hit-rate dip after the install, p99 TTFT and
  planned imbalance. ``--json`` prints ``{"transitions": [{"fresh": {...}, "churn_aware":
  {...}}, ...], ...}``.

Registered from :mod:`cachectl.sim_cmd` (one hook), so the simulator's own commands stay there.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from sim import presets
from sim.calibration import single_destination_knee
from sim.drift import GENERATORS, SIGMA, STEPS, DriftError, DriftSettings, run_drift
from sim.engine_model import PROFILES, EngineProfile, UnknownProfileError, get_profile
from sim.workloads.registry import make_workload

KNEE_SLO_S = 3.5


def profile_of(name: str | None, workload: str) -> EngineProfile:
    try:
        return get_profile(name or presets.preset_for(workload).profile)
    except UnknownProfileError as exc:
        raise CliError(f"--profile: {exc}") from None


def measured_q_cap(workload: str, profile: EngineProfile, top_k: int) -> float:
    """The single-destination knee, as ``cachectl sim`` measures it (printed to stderr)."""
    started = time.perf_counter()
    q_cap = single_destination_knee(make_workload(workload, top_k=top_k), profile).q_cap
    print(
        f"q_cap = {q_cap:.3f} req/s (single-destination knee at p99 <= {KNEE_SLO_S:g} s, "
        f"measured in {time.perf_counter() - started:.1f} s)",
        file=sys.stderr,
    )
    return q_cap


def _drift(args: argparse.Namespace) -> int:
    if args.workload not in GENERATORS:
        raise CliError(f"--workload: drift supports {', '.join(GENERATORS)}; got {args.workload!r}")
    if args.top_k < 1:
        raise CliError(f"--top-k: must be >= 1, got {args.top_k}")
    profile = profile_of(args.profile, args.workload)
    preset = presets.preset_for(args.workload)
    q_cap = args.q_cap or measured_q_cap(args.workload, profile, args.top_k)
    settings = DriftSettings(
        profile=profile,
        q_cap=q_cap,
        qps=args.qps or preset.ref_qps or 100.0,
        nodes=args.nodes or preset.nodes,
        top_k=args.top_k,
        interval_s=args.interval,
        plan_window_s=args.plan_window,
        dip_window_s=args.dip_window,
        tolerance=args.tolerance,
        sigma=args.sigma,
        steps=args.steps,
        seed=args.seed,
    )
    started = time.perf_counter()
    try:
        document = run_drift(args.workload, settings)
    except DriftError as exc:
        raise CliError(str(exc)) from None
    document["wall_s"] = time.perf_counter() - started
    if args.json:
        print_json(document)
        return 0
    print(
        f"drift: {args.workload}, {settings.nodes} x {profile.name}, {settings.qps:g} QPS, "
        f"q_cap {q_cap:.3f}, σ {settings.sigma:g} over {settings.steps} intervals of "
        f"{settings.interval_s:g} s"
    )
    rows: list[list[object]] = []
    for i, (t, d) in enumerate(zip(document["transitions"], document["details"], strict=True)):
        for arm in ("fresh", "churn_aware"):
            m = t[arm]
            rows.append([i + 1, d["at_s"], arm, round(m["churn"], 4), round(m["hit_dip"], 4),
                         round(m["p99_s"], 3), round(m["imbalance"], 4)])  # fmt: skip
    print_table(("T", "AT_S", "REPLANNER", "CHURN", "HIT_DIP", "P99_S", "IMBALANCE"), rows)
    summary = document["summary"]
    for name, ok in summary["checks"].items():
        print(f"{name}: {'yes' if ok else 'NO'}")
    return 0


def register(commands: Any) -> None:
    """Add ``drift`` (and the gate's ``shadow``) under ``cachectl sim``."""
    drift: argparse.ArgumentParser = commands.add_parser(
        "drift", help="fresh vs churn-aware replanning under lognormal rate drift"
    )
    add = drift.add_argument
    add("--workload", required=True, help=f"one of {', '.join(GENERATORS)}")
    add("--profile", choices=list(PROFILES), help="engine profile (default: the workload's)")
    add("--nodes", type=int, metavar="R", help="destinations (default: the preset's, 30)")
    add("--top-k", type=int, default=128, metavar="K", help="active set (default 128)")
    add("--qps", type=float, metavar="Q", help="offered load (default: the preset's ref QPS)")
    add("--q-cap", type=float, metavar="Q", help="default: measured single-destination knee")
    add("--interval", type=float, default=120.0, metavar="S", help="control interval (120 s)")
    add("--plan-window", type=float, default=60.0, metavar="S",
        help="rates estimated over the interval's last S seconds (60)")  # fmt: skip
    add("--dip-window", type=float, default=30.0, metavar="S",
        help="hit rate compared over S seconds before and after each install (30)")  # fmt: skip
    add("--sigma", type=float, default=SIGMA, help=f"drift per interval (default {SIGMA})")
    add("--steps", type=int, default=STEPS, help=f"drift intervals (default {STEPS})")
    add("--tolerance", type=float, default=0.05, help="replanner imbalance bound (0.05)")
    add("--seed", type=int, default=1)
    add("--json", action="store_true", help="print one JSON object")
    drift.set_defaults(handler=_drift)
