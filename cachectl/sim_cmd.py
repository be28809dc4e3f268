"""``cachectl sim run | capacity | ablation``: the cluster simulator and the paper's experiments.

* ``run``: one policy at one QPS; a summary line, or one JSON object with ``--json``; with
  ``--affinity`` also the delivered-affinity numbers (:mod:`sim.affinity`).
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
from cachectl.sim_flags import add_common_flags, add_study_flags
from cachectl.sim_settings import (
    check_policies,
    check_positive,
    load_workload,
    parse_floats,
    parse_ints,
    run_settings,
)
from sim import presets
from sim.affinity import affinity_line, run_with_affinity
from sim.report import (
    progress_bar,
    protocols_by_qps,
    study_document,
    summarize_policies,
    table_rows,
)
from sim.study import (
    RunRecord,
    RunSettings,
    prewarm_for,
    run_single,
    run_study,
)
from sim.types import Workload

ABLATION = ("flat", "affinity_only", "replicate_random", "cacheroute")


def _protocol_line(workload: Workload, settings: RunSettings, qps: float) -> str:
    return f"@ {qps:g} QPS " + settings.protocol(prewarm_for(workload, settings, qps)).describe()


# -- handlers -------------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    check_positive("--qps", args.qps)
    policy = check_policies("--policy", (args.policy,))[0]
    preset = presets.preset_for(args.workload)
    workload = load_workload(args, preset)
    settings = run_settings(args, preset, workload, (policy,), None)
    affinity = None
    if args.affinity:
        started = time.perf_counter()
        metrics, affinity = run_with_affinity(
            workload, policy, settings, qps=args.qps, seed=args.seed
        )
        record = RunRecord(policy, args.seed, args.qps, metrics, time.perf_counter() - started)
    else:
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
    if affinity is not None:
        out["affinity"] = affinity.to_dict()
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
        if affinity is not None:
            print(affinity_line(affinity))
    return 0


def _study(args: argparse.Namespace, policies: tuple[str, ...], title: str) -> int:
    preset = presets.study_preset(args.workload, args.profile)
    slos = parse_floats("--slo", args.slo) if args.slo else preset.slos
    ladder = parse_floats("--ladder", args.ladder) if args.ladder else preset.ladder
    if ladder is None:
        raise CliError(f"--ladder: required for --workload {args.workload} (no preset ladder)")
    ladder = tuple(sorted(set(ladder)))
    seeds = parse_ints("--seeds", args.seeds) if args.seeds else preset.seeds
    ref_qps = args.ref_qps if args.ref_qps is not None else presets.default_ref_qps(ladder, preset)
    if ref_qps not in ladder:
        raise CliError(f"--ref-qps: {ref_qps:g} is not a rung of the ladder")
    if args.jobs < 1:
        raise CliError(f"--jobs: must be >= 1, got {args.jobs}")
    workload = load_workload(args, preset)
    settings = run_settings(args, preset, workload, policies, max(slos))
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print("\r" + progress_bar(done, total, time.perf_counter() - started), end="",
              file=sys.stderr)  # fmt: skip

    origin = provenance.provenance(provenance.now())  # the code as loaded, before the run
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
        ) | {"provenance": origin}
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
    return _study(args, check_policies("--policies", names), "SLO capacity")


def _ablation(args: argparse.Namespace) -> int:
    return _study(args, ABLATION, "Mechanism ablation")


def register(sub: Any) -> None:
    group: argparse.ArgumentParser = sub.add_parser("sim", help="simulate policies on workloads")
    commands = group.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)

    run = commands.add_parser("run", help="one policy at one QPS")
    add_common_flags(run)
    run.add_argument("--policy", required=True, help="policy name (see the registry)")
    run.add_argument("--qps", type=float, required=True, help="offered load, requests/s")
    run.add_argument("--duration", type=float, required=True, metavar="S",
                     help="simulated arrival window (s)")  # fmt: skip
    run.add_argument("--seed", type=int, required=True)
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument(
        "--affinity", action="store_true",
        help="also print delivered affinity: follow-up cached fraction, follow-ups on the turn-1 "
        "node, reusable vs delivered cached tokens, load CoV (sim/affinity.py)",
    )  # fmt: skip
    run.set_defaults(handler=_run)

    capacity = commands.add_parser("capacity", help="SLO capacity over a QPS ladder")
    add_common_flags(capacity)
    capacity.add_argument("--policies", default=",".join(presets.TABLE1_POLICIES),
                          metavar="P1,P2", help="policies, comma-separated (default: Table 1's "
                          "seven: " + ",".join(presets.TABLE1_POLICIES) + ")")  # fmt: skip
    add_study_flags(capacity)
    capacity.set_defaults(handler=_capacity)

    ablation = commands.add_parser(
        "ablation", help="Flat-LB, + affinity, + replication (random), + LPT"
    )
    add_common_flags(ablation)
    add_study_flags(ablation)
    ablation.set_defaults(handler=_ablation)
    sim_gate_cmd.register(commands)  # drift and shadow: the plan-lifecycle experiments (issue 11)
