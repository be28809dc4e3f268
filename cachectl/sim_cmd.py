"""``cachectl sim run | capacity | ablation``: the cluster simulator and the paper's experiments.

* ``run``: one policy at one QPS; a summary line, or one JSON object with ``--json``.
* ``capacity``: policies x QPS ladder x seeds over worker processes; a paper-like table (KV hit,
  capacity at each SLO with its 95% Student-t interval, p99 TTFT at the reference QPS,
  imbalance), ``--out OUT`` (or ``--json`` to stdout) with a ``results`` list, ``--plot
  OUT.png`` (p99 TTFT vs QPS).
* ``ablation``: the mechanism study, the same search over Flat-LB, + affinity
  (``affinity_only``), + replication with random placement (``replicate_random``) and + LPT
  (``cacheroute``).

Defaults come from the workload's preset (:mod:`sim.presets`) and the simulator's modules; every
one is spelled out in ``--help`` and in docs/components/simulator.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from cachectl import provenance, sim_gate_cmd
from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from dataplane.core.policies.registry import POLICIES
from sim import presets
from sim.calibration import single_destination_knee
from sim.cluster import DEFAULT_SNAPSHOT_S, DEFAULT_TIMEOUT_S, FRONTS
from sim.engine_model import PROFILES, EngineProfile, UnknownProfileError, get_profile
from sim.planning import DEFAULT_PLAN_WINDOW_S, DEFAULT_SLOTS_PER_NODE, placement_of
from sim.report import (
    key_of,
    progress_bar,
    protocols_by_qps,
    study_document,
    summarize_policies,
    table_rows,
)
from sim.study import (
    STEADY_DURATION_S,
    STEADY_WARMUP_S,
    RunSettings,
    default_jobs,
    prewarm_for,
    run_single,
    run_study,
)
from sim.types import Workload
from sim.workloads.registry import make_workload

ABLATION = ("flat", "affinity_only", "replicate_random", "cacheroute")
KNEE_SLO_S = 3.5


# -- flag parsing ---------------------------------------------------------------------------------


def _floats(flag: str, text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise CliError(f"{flag}: expected positive numbers, got {text!r}")
    return values


def _ints(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CliError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values:
        raise CliError(f"{flag}: expected at least one integer")
    return values


def _positive(flag: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise CliError(f"{flag}: must be > 0, got {value}")


def _policies(flag: str, names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if name not in POLICIES:
            raise CliError(f"{flag}: unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return names


def _profile(args: argparse.Namespace, preset: presets.Preset) -> EngineProfile:
    try:
        profile = get_profile(args.profile or preset.profile)
    except UnknownProfileError as exc:
        raise CliError(f"--profile: {exc}") from None
    _positive("--kv-blocks", args.kv_blocks)
    return profile.with_overrides(kv_blocks=args.kv_blocks)


def _option_value(text: str) -> Any:
    """``--option`` values: an int, a float, else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_workload(args: argparse.Namespace, preset: presets.Preset) -> Workload:
    """The workload from the registry, with the preset's options and the command's overrides."""
    options: dict[str, Any] = dict(preset.options)
    if args.top_k is not None:
        options["top_k"] = args.top_k
    if args.trace is not None:
        options["path"] = args.trace
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--option: expected NAME=VALUE, got {item!r}")
        options[name] = _option_value(value)
    try:
        return make_workload(args.workload, **options)
    except (ValueError, TypeError, OSError) as exc:
        raise CliError(f"--workload {args.workload}: {exc}") from None


def _settings(
    args: argparse.Namespace,
    preset: presets.Preset,
    workload: Workload,
    policies: tuple[str, ...],
    abort_above_s: float | None,
) -> RunSettings:
    for flag in (
        "duration", "plan_window", "timeout", "snapshot_ms", "q_cap", "knee_slo", "tree_sync_ms",
    ):  # fmt: skip
        _positive("--" + flag.replace("_", "-"), getattr(args, flag))
    if args.warmup is not None and not 0 <= args.warmup < args.duration:
        raise CliError(f"--warmup: must be in [0, --duration), got {args.warmup}")
    for flag, value in (("--nodes", args.nodes), ("--routers", args.routers)):
        if value is not None and value < 1:
            raise CliError(f"{flag}: must be >= 1, got {value}")
    if args.slots < 0:
        raise CliError(f"--slots: must be >= 0, got {args.slots}")
    profile = _profile(args, preset)
    warmup = min(STEADY_WARMUP_S, args.duration / 5) if args.warmup is None else args.warmup
    prewarm = _prewarm(args.prewarm)
    q_cap = args.q_cap
    if q_cap is None and any(placement_of(p) is not None for p in policies):
        started = time.perf_counter()
        q_cap = single_destination_knee(workload, profile, slo_s=args.knee_slo).q_cap
        print(
            f"q_cap = {q_cap:.3f} req/s (single-destination knee at p99 <= {args.knee_slo:g} s,"
            f" measured in {time.perf_counter() - started:.1f} s)",
            file=sys.stderr,
        )
    return RunSettings(
        profile=profile,
        q_cap=q_cap or 1.0,
        nodes=args.nodes or preset.nodes,
        routers=args.routers,
        duration_s=args.duration,
        warmup_s=warmup,
        plan_window_s=args.plan_window,
        slots_per_node=args.slots,
        snapshot_interval_s=args.snapshot_ms / 1000.0,
        timeout_s=args.timeout,
        abort_above_s=abort_above_s,
        prewarm_s=prewarm,
        cache_outputs=not args.no_output_cache,
        front=args.front,
        echo_tokens=not args.no_session_echo,
        tree_sync_s=None if args.tree_sync_ms is None else args.tree_sync_ms / 1000.0,
        policy_params=_policy_params(args.policy_param),
    )


def _policy_params(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--policy-param POLICY.NAME=VALUE`` items as {policy: {name: value}}, names checked."""
    params: dict[str, dict[str, Any]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        policy, dot, name = target.partition(".")
        if not sep or not dot or not policy or not name:
            raise CliError(f"--policy-param: expected POLICY.NAME=VALUE, got {item!r}")
        _policies("--policy-param", (policy,))
        params.setdefault(policy, {})[name] = _option_value(value)
    for policy, values in params.items():
        try:
            POLICIES[policy](**values)
        except (TypeError, ValueError) as exc:
            raise CliError(f"--policy-param {policy}: {exc}") from None
    return params


def _prewarm(text: str) -> float | None:
    """``--prewarm``: ``auto`` (the convergence check) or seconds >= 0."""
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"--prewarm: expected 'auto' or seconds, got {text!r}") from None
    if not value >= 0:
        raise CliError(f"--prewarm: must be >= 0 seconds, got {text!r}")
    return value


def _protocol_line(workload: Workload, settings: RunSettings, qps: float) -> str:
    return f"@ {qps:g} QPS " + settings.protocol(prewarm_for(workload, settings, qps)).describe()


# -- handlers -------------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    _positive("--qps", args.qps)
    policy = _policies("--policy", (args.policy,))[0]
    preset = presets.preset_for(args.workload)
    workload = load_workload(args, preset)
    settings = _settings(args, preset, workload, (policy,), None)
    record = run_single(workload, policy, settings, qps=args.qps, seed=args.seed)
    out = {
        "workload": args.workload,
        "policy": policy,
        "qps": args.qps,
        "seed": args.seed,
        "nodes": settings.nodes,
        "profile": settings.profile.name,
        "q_cap": settings.q_cap,
        "wall_s": record.wall_s,
        "protocol": record.protocol.to_dict() if record.protocol else None,
        **record.metrics.to_dict(),
    }
    if args.json:
        print_json(out)
    else:
        m = record.metrics
        print(
            f"{policy} @ {args.qps:g} QPS: {m.requests} requests, KV hit {100 * m.kv_hit:.1f}%, "
            f"TTFT p50 {m.ttft_p50_s:.3f} s p99 {m.ttft_p99_s:.3f} s, "
            f"imbalance {m.imbalance:.2f}, failures {100 * m.failures:.2f}%"
        )
        if record.protocol:
            print(record.protocol.describe())
    return 0


def _study(args: argparse.Namespace, policies: tuple[str, ...], title: str) -> int:
    preset = presets.study_preset(args.workload, args.profile)
    slos = _floats("--slo", args.slo) if args.slo else preset.slos
    ladder = _floats("--ladder", args.ladder) if args.ladder else preset.ladder
    if ladder is None:
        raise CliError(f"--ladder: required for --workload {args.workload} (no preset ladder)")
    ladder = tuple(sorted(set(ladder)))
    seeds = _ints("--seeds", args.seeds) if args.seeds else preset.seeds
    ref_qps = args.ref_qps if args.ref_qps is not None else presets.default_ref_qps(ladder, preset)
    if ref_qps not in ladder:
        raise CliError(f"--ref-qps: {ref_qps:g} is not a rung of the ladder")
    if args.jobs < 1:
        raise CliError(f"--jobs: must be >= 1, got {args.jobs}")
    workload = load_workload(args, preset)
    settings = _settings(args, preset, workload, policies, max(slos))
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print("\r" + progress_bar(done, total, time.perf_counter() - started), end="",
              file=sys.stderr)  # fmt: skip

    started_at = provenance.now()
    records = run_study(
        workload, policies, settings, ladder=ladder, seeds=seeds, jobs=args.jobs,
        progress=progress,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    print(f"\n{len(records)} runs in {elapsed:.1f} s", file=sys.stderr)
    results = summarize_policies(records, slos, ref_qps)
    print(f"{title}: {args.workload}, {settings.nodes} x {settings.profile.name}, "
          f"q_cap {settings.q_cap:.3f}, seeds {','.join(map(str, seeds))}",
          file=sys.stderr if args.json == "-" else sys.stdout)  # fmt: skip
    headers, rows = table_rows(results, slos, ref_qps)
    to_stdout = args.json == "-"  # --json: stdout holds the JSON only; the table goes to stderr
    print_table(headers, rows, out=sys.stderr if to_stdout else None)
    for qps, protocol in protocols_by_qps(records).items():
        print(f"@ {qps:g} QPS {protocol.describe()}", file=sys.stderr if to_stdout else sys.stdout)
    out = args.out or (None if args.json in (None, "-") else args.json)
    if args.json not in (None, "-") and args.out is None:
        print(f"cachectl: warning: --json {args.json} is deprecated; use --out {args.json}",
              file=sys.stderr)  # fmt: skip
    if out or to_stdout:
        document = study_document(
            args.workload, policies, ladder, seeds, slos, ref_qps, settings, records, elapsed
        ) | {"provenance": provenance.provenance(started_at)}
        if out:
            Path(out).write_text(json.dumps(document, indent=1) + "\n")
        if to_stdout:
            print_json(document)
    if args.plot:
        from sim.plot import plot  # noqa: PLC0415 - matplotlib only when a plot is asked for

        source = f" ({Path(args.trace).name})" if args.trace else ""
        plot(results, slos, args.plot, title=f"{title}: {args.workload}{source}")
    return 0


def _capacity(args: argparse.Namespace) -> int:
    names = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    if not names:
        raise CliError("--policies: expected at least one policy")
    return _study(args, _policies("--policies", names), "SLO capacity")


def _ablation(args: argparse.Namespace) -> int:
    return _study(args, ABLATION, "Mechanism ablation")


# -- parsers --------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workload", required=True, help="workload name from the workload registry")
    add("--trace", metavar="PATH", help="trace file for --workload trace (Mooncake or Claude Code)")
    add("--top-k", type=int, metavar="K", help="active set: top K keys (paper default: 128)")
    add("--option", action="append", default=[], metavar="NAME=VALUE",
        help="another workload option, e.g. arrival=gamma (repeatable)")  # fmt: skip
    add("--nodes", type=int, metavar="R", help="destinations (default 30, every preset)")
    add("--profile", choices=list(PROFILES), help="engine profile (default: the workload's "
        "testbed: paper/trace 70B, whales 8B, lowshare Qwen3-32B)")  # fmt: skip
    add("--kv-blocks", type=int, metavar="B", help="override the profile's KV blocks per node")
    add("--routers", type=int, default=1, metavar="N", help="simulated routers (default 1)")
    add("--snapshot-ms", type=float, default=DEFAULT_SNAPSHOT_S * 1000, metavar="MS",
        help="load snapshot interval (default 250 ms)")  # fmt: skip
    add("--warmup", type=float, metavar="S", help="simulated seconds excluded from metrics "
        f"(default min({STEADY_WARMUP_S:g}, duration/5))")  # fmt: skip
    add("--plan-window", type=float, default=DEFAULT_PLAN_WINDOW_S, metavar="S",
        help="prior window the plan's rates are estimated on (default 60 s)")  # fmt: skip
    add("--q-cap", type=float, metavar="Q", help="per-destination load target (default: "
        "measured as the single-destination knee)")  # fmt: skip
    add("--knee-slo", type=float, default=KNEE_SLO_S, metavar="S",
        help="p99 TTFT bound of the q_cap knee (default 3.5 s)")  # fmt: skip
    add("--slots", type=int, default=DEFAULT_SLOTS_PER_NODE, metavar="W",
        help="warm slots per destination (default 8, the paper's)")  # fmt: skip
    add("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
        help="TTFT past this is a failure (default 30 s)")  # fmt: skip
    add("--prewarm", default="auto", metavar="S|auto",
        help="seconds of the preceding window replayed into caches and policies before the run "
        "(default auto: derived per QPS by sim.steady's convergence check; 0 = cold)")  # fmt: skip
    add("--no-output-cache", action="store_true",
        help="engines do not cache generated tokens (default: they do, like vLLM V1)")  # fmt: skip
    add("--front", choices=FRONTS, default="round_robin",
        help="how a front tier deals requests to --routers: round_robin (default), key (hash of "
        "the business key), session (hash of the conversation)")  # fmt: skip
    add("--no-session-echo", action="store_true",
        help="multi-turn clients do not echo the session token (default: they do)")  # fmt: skip
    add("--tree-sync-ms", type=float, metavar="MS",
        help="sync prefix-history trees (preble, sglang) across routers every MS, as the SGLang "
        "model gateway's mesh does once a second (default: no sync)")  # fmt: skip
    add("--policy-param", action="append", default=[], metavar="POLICY.NAME=VALUE",
        help="a policy parameter, e.g. cacheroute_online.epsilon=0.5 (repeatable)")  # fmt: skip


def _preset_ladders() -> str:
    ladders = []
    for workload, preset in presets.PRESETS.items():
        for profile, (ladder, _) in preset.by_profile.items():
            ladders.append(f"{workload} on {profile} " + ",".join(key_of(q) for q in ladder))
        if preset.ladder is not None:
            ladders.append(f"{workload} " + ",".join(key_of(q) for q in preset.ladder))
    return "; ".join(ladders)


def _study_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--slo", metavar="S1,S2",
        help="p99 TTFT SLOs, s (default: paper 2,3.5,5 as in Table 1; else 3.5,5)")  # fmt: skip
    add("--ladder", metavar="Q1,Q2", help="offered QPS rungs (default per workload and profile, "
        f"sim/presets.py: {_preset_ladders()})")  # fmt: skip
    add("--seeds", metavar="S1,S2",
        help="seeds (default: paper 2,3,4,5,6 as in the paper; else 1,2,3)")  # fmt: skip
    add("--ref-qps", type=float, metavar="Q", help="QPS of the p99/hit/imbalance columns "
        "(default: paper 100, or 800 on the public 70B profile; whales 300; lowshare 40; else "
        "the middle rung)")  # fmt: skip
    add("--duration", type=float, default=STEADY_DURATION_S, metavar="S",
        help="simulated arrival window per run after the pre-warm (default 150 s: 30 s warm-up + "
        "120 s measured)")  # fmt: skip
    add("--jobs", type=int, default=default_jobs(), metavar="N",
        help="worker processes (default: CPU count)")  # fmt: skip
    add(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="print the results as one JSON "
        "object (--json OUT, which writes OUT, still works but is deprecated: use --out OUT)",
    )
    add("--out", metavar="OUT", help="write the results as JSON to OUT")  # fmt: skip
    add("--plot", metavar="OUT.png", help="draw p99 TTFT vs offered QPS per policy")


def register(sub: Any) -> None:
    group: argparse.ArgumentParser = sub.add_parser("sim", help="simulate policies on workloads")
    commands = group.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)

    run = commands.add_parser("run", help="one policy at one QPS")
    _common(run)
    run.add_argument("--policy", required=True, help="policy name (see the registry)")
    run.add_argument("--qps", type=float, required=True, help="offered load, requests/s")
    run.add_argument("--duration", type=float, required=True, metavar="S",
                     help="simulated arrival window (s)")  # fmt: skip
    run.add_argument("--seed", type=int, required=True)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.set_defaults(handler=_run)

    capacity = commands.add_parser("capacity", help="SLO capacity over a QPS ladder")
    _common(capacity)
    capacity.add_argument("--policies", default=",".join(presets.TABLE1_POLICIES),
                          metavar="P1,P2", help="policies, comma-separated (default: Table 1's "
                          "seven: " + ",".join(presets.TABLE1_POLICIES) + ")")  # fmt: skip
    _study_flags(capacity)
    capacity.set_defaults(handler=_capacity)

    ablation = commands.add_parser(
        "ablation", help="Flat-LB, + affinity, + replication (random), + LPT"
    )
    _common(ablation)
    _study_flags(ablation)
    ablation.set_defaults(handler=_ablation)
    sim_gate_cmd.register(commands)  # drift and shadow: the plan-lifecycle experiments (issue 11)
