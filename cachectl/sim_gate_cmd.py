"""``cachectl sim drift | shadow``: the plan-lifecycle experiments of issue 11.

* ``shadow``: the shadow-replay gate offline (:mod:`sim.shadow_replay`): the plan the control
  plane would build from the workload's prior window, replayed against Flat-LB on the rest of
  the stream; prints ``{"verdict": "pass" | "fail", "reason": ..., ...}`` with ``--json``.
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
from controlplane.core.replanner import DEFAULT_MAX_CHURN
from sim import presets
from sim.calibration import single_destination_knee
from sim.drift import GENERATORS, SIGMA, STEPS, DriftError, DriftSettings, run_drift
from sim.engine_model import PROFILES, EngineProfile, UnknownProfileError, get_profile
from sim.planning import make_stream, plan_for
from sim.shadow_replay import (
    CANDIDATE,
    PLAN_POLICIES,
    ShadowError,
    ShadowSettings,
    report,
    shadow,
)
from sim.workloads.registry import make_workload

KNEE_SLO_S = 3.5


def profile_of(name: str | None, workload: str) -> EngineProfile:
    try:
        return get_profile(name or presets.preset_for(workload).profile)
    except UnknownProfileError as exc:
        raise CliError(f"--profile: {exc}") from None


def measured_q_cap(workload: str, profile: EngineProfile, top_k: int) -> float:
    """The single-destination knee, as ``cachectl sim`` measures it (printed to stderr)."""
    return measured_q_cap_of(make_workload(workload, top_k=top_k), profile)


def _drift(args: argparse.Namespace) -> int:
    if args.workload not in GENERATORS:
        raise CliError(f"--workload: drift supports {', '.join(GENERATORS)}; got {args.workload!r}")
    if not 0 <= args.max_churn <= 1:
        raise CliError(f"--max-churn: must be within [0, 1], got {args.max_churn}")
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
        max_churn=args.max_churn if args.max_churn > 0 else None,
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


def _shadow(args: argparse.Namespace) -> int:
    preset = presets.preset_for(args.workload)
    options: dict[str, Any] = dict(preset.options)
    if args.top_k is not None:
        options["top_k"] = args.top_k
    try:
        workload = make_workload(args.workload, **options)
    except (ValueError, TypeError, OSError) as exc:
        raise CliError(f"--workload {args.workload}: {exc}") from None
    profile = profile_of(args.profile, args.workload)
    nodes = args.nodes or preset.nodes
    for flag, value in (("--duration", args.duration), ("--plan-window", args.plan_window)):
        if not value > 0:
            raise CliError(f"{flag}: must be > 0, got {value}")
    if args.q_cap is not None and not args.q_cap > 0:
        raise CliError(f"--q-cap: must be > 0, got {args.q_cap}")
    q_cap = args.q_cap or measured_q_cap_of(workload, profile)
    qps = args.qps or preset.ref_qps or 0.5 * q_cap * nodes
    stream = make_stream(
        workload, qps=qps, duration_s=args.duration, seed=args.seed,
        prior_window_s=args.plan_window,
    )  # fmt: skip
    table = plan_for("lpt", stream, [f"d{i:03d}" for i in range(nodes)], q_cap=q_cap)
    assert table is not None
    settings = ShadowSettings(
        profile=profile, nodes=nodes, slo_s=args.slo, seeds=args.seeds, policy=args.policy
    )
    started = time.perf_counter()
    try:
        verdict = shadow(stream.requests, table, settings, progress=_progress(started))
    except ShadowError as exc:
        raise CliError(str(exc)) from None
    document = report(verdict)
    document.update(workload=args.workload, profile=profile.name, nodes=nodes, q_cap=q_cap,
                    plan_qps=qps, plan_version=table.version,
                    wall_s=time.perf_counter() - started)  # fmt: skip
    if args.json:
        print_json(document)
    else:
        print_shadow(document)
    return 0


def _progress(started: float) -> Any:
    def note(message: str) -> None:
        print(f"[{time.perf_counter() - started:5.0f} s] {message}", file=sys.stderr)

    return note


def measured_q_cap_of(workload: Any, profile: EngineProfile) -> float:
    started = time.perf_counter()
    q_cap = single_destination_knee(workload, profile).q_cap
    print(
        f"q_cap = {q_cap:.3f} req/s (single-destination knee at p99 <= {KNEE_SLO_S:g} s, "
        f"measured in {time.perf_counter() - started:.1f} s)",
        file=sys.stderr,
    )
    return q_cap


def print_shadow(document: dict[str, Any]) -> None:
    """The human form of a shadow report (shared with ``plan shadow``, whose inconclusive
    verdict has a reason but no replay)."""
    print(f"verdict: {document['verdict']} ({document['reason']})")
    if "capacity_qps" not in document:
        if document.get("samples") is not None:
            print(f"{document['samples']:,} sampled requests; profile {document['profile']}")
        return
    caps = document["capacity_qps"]
    print(f"capacity at p99 <= {document['tests']['slo_s']:g} s: candidate "
          f"{caps['cacheroute']:.1f} QPS, Flat-LB {caps['flat']:.1f} QPS")  # fmt: skip
    replayed = document.get("replayed")  # absent from reports stored before thinning
    if replayed and replayed["requests"] < replayed["of"]:
        print(f"replayed {replayed['requests']:,} of {replayed['of']:,} requests, thinned evenly "
              f"over the whole window (1 in {replayed['thinning']:.2f})")  # fmt: skip
    rows: list[list[object]] = []
    for name, load in document["loads"].items():
        for policy in ("cacheroute", "flat"):
            m = load[policy]
            rows.append([name, round(load["qps"], 1), policy, round(m["kv_hit"], 4),
                         round(m["imbalance"], 3), round(m["p99_s"], 3),
                         round(m["failures"], 4)])  # fmt: skip
    print_table(("LOAD", "QPS", "POLICY", "KV_HIT", "IMBALANCE", "P99_S", "FAILURES"), rows)


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
    add(
        "--max-churn",
        type=float,
        default=DEFAULT_MAX_CHURN,
        help="replanner churn cap per interval (0.10); 0: none (the bound wins, else fresh)",
    )
    add("--seed", type=int, default=1)
    add("--json", action="store_true", help="print one JSON object")
    drift.set_defaults(handler=_drift)

    gate: argparse.ArgumentParser = commands.add_parser(
        "shadow", help="the shadow-replay gate offline: candidate plan vs Flat-LB"
    )
    add = gate.add_argument
    add("--workload", required=True, help="workload name from the workload registry")
    add("--profile", choices=list(PROFILES), help="engine profile (default: the workload's)")
    add("--nodes", type=int, metavar="R", help="destinations (default: the preset's, 30)")
    add("--top-k", type=int, metavar="K", help="active set (default: the preset's)")
    add("--qps", type=float, metavar="Q",
        help="recorded load (default: the preset's ref QPS, else half of q_cap x R)")  # fmt: skip
    add("--q-cap", type=float, metavar="Q", help="default: measured single-destination knee")
    add("--duration", type=float, default=120.0, metavar="S", help="replayed stream (120 s)")
    add("--plan-window", type=float, default=60.0, metavar="S",
        help="prior window the plan is built from (60 s)")  # fmt: skip
    add("--slo", type=float, default=3.5, metavar="S", help="p99 TTFT SLO of the knee (3.5 s)")
    add("--seeds", type=int, default=3, metavar="N", help="replays per load (default 3)")
    add("--policy", choices=PLAN_POLICIES, default=CANDIDATE,
        help="the routers' policy the plan is replayed with (default: %(default)s)")  # fmt: skip
    add("--seed", type=int, default=1, help="workload seed")
    add("--json", action="store_true", help="print one JSON object")
    gate.set_defaults(handler=_shadow)
