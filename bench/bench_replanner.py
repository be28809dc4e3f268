"""Churn-aware replanner at scale: 10M keys, R = 1,000, W = 64 (issue 11 target: ≤ 3 s).

Inputs are bench_core's planner workload (unique random hashes, lognormal rates with Gini 0.756,
total 0.8 · R · q_cap, q_cap = 4 req/s). The previous plan is the fresh plan of those rates; the
next rates are one step of the paper's drift model (each rate × exp(0.3 · z)). In the same run
the baseline is a fresh ``build_plan`` of the drifted rates. Each timing is the median of
``--repeat`` runs (wall time; the replan includes its own fresh build, which it needs for the
bound). The replan runs with the control plane's default churn cap (10%). Writes its section
of docs/benchmarks.md unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_report import machine
from core_workload import Q_CAP, workload

from controlplane.core.churn import compare
from controlplane.core.planner import PlanInput, build_plan
from controlplane.core.replanner import DEFAULT_MAX_CHURN, replan

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_replanner:begin -->", "<!-- bench_replanner:end -->"
TARGET_S = 3.0


def run(keys: int, nodes: int, slots: int, repeat: int, seed: int) -> dict[str, float]:
    hashes, rates, _ = workload(keys, nodes, seed)
    base = PlanInput(hashes, rates, [f"n{i:04d}" for i in range(nodes)], Q_CAP, slots)
    previous = build_plan(base)
    rng = np.random.default_rng(seed + 1)
    drifted = replace(base, rates=rates * np.exp(0.3 * rng.standard_normal(keys)))
    fresh_s, replan_s = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        fresh = build_plan(drifted)
        fresh_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = replan(previous, drifted, max_churn=DEFAULT_MAX_CHURN)
        replan_s.append(time.perf_counter() - started)
    fresh_cmp = compare(previous, fresh)
    aware_cmp = compare(previous, result.table)
    return {
        "keys": keys,
        "nodes": nodes,
        "slots": slots,
        "admitted": result.table.num_keys,
        "fresh_s": statistics.median(fresh_s),
        "replan_s": statistics.median(replan_s),
        "fresh_churn": fresh_cmp.churn,
        "fresh_moved": fresh_cmp.moved_share,
        "aware_churn": aware_cmp.churn,
        "aware_moved": aware_cmp.moved_share,
        "fresh_imbalance": fresh.stats.planned_imbalance,
        "aware_imbalance": result.imbalance,
        "moves": result.repair_moves,
        "used_fresh": float(result.used_fresh),
    }


def render(command: str, r: dict[str, float]) -> str:
    info = machine()
    met = "met" if r["replan_s"] <= TARGET_S else "**missed**"
    keys, nodes, admitted = f"{r['keys']:,.0f}", f"{r['nodes']:,.0f}", f"{r['admitted']:,.0f}"
    time_row = f"| time | {r['fresh_s']:.2f} s | {r['replan_s']:.2f} s | ≤ {TARGET_S:g} s | {met} |"
    lines = [
        BEGIN,
        "## Churn-aware replanner (`bench/bench_replanner.py`, issue 11)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, numpy "
        f"{info['numpy']}, {info['date']}; load average at the end {info['load']}",
        "",
        f"{keys} keys (bench_core's lognormal workload), R = {nodes}, W = {r['slots']:.0f}, "
        f"{admitted} admitted keys; previous plan = the fresh plan of the rates, next rates = "
        "one σ = 0.3 lognormal drift step; the replan with the control plane's default churn "
        "cap (`max_churn` 0.10). Median wall time of the runs.",
        "",
        "| | fresh `build_plan` (baseline) | churn-aware `replan` | target | |",
        "|---|---|---|---|---|",
        time_row,
        f"| churn (1 − unchanged / keys in either) | {r['fresh_churn']:.3f} | "
        f"{r['aware_churn']:.3f} | | |",
        f"| keys warm in both whose set changed | {r['fresh_moved']:.3f} | "
        f"{r['aware_moved']:.3f} | | |",
        f"| planned imbalance (max/mean) | {r['fresh_imbalance']:.4f} | "
        f"{r['aware_imbalance']:.4f} (bound ×1.05) | | |",
        f"| repair moves | | {r['moves']:.0f} | | |",
        "",
        "The replan time includes the fresh build it compares against (the imbalance bound). "
        "Churn also counts keys that joined or left the warm set; admission is Algorithm 1's, "
        "so that part is the same for both replanners. Here a third of the warm set turns over at "
        "the admission threshold: the churn cap counts those forced keys first, so it cannot bind "
        "and the repair needs no moves (the cap binds on the drift study, docs/results.md).",
        END,
    ]
    return "\n".join(lines) + "\n"


def update_doc(section: str) -> None:
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + "\n" + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    result = run(args.keys, args.nodes, args.slots, args.repeat, args.seed)
    for name, value in result.items():
        print(f"{name}: {value}")
    if not args.no_write:
        command = "nice -n 10 .venv/bin/python bench/bench_replanner.py"
        update_doc(render(command, result))
    return 0 if result["replan_s"] <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
