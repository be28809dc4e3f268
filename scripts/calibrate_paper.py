"""Fit the paper-testbed calibration on Flat-LB observations only and freeze it (sim/fit.py).

    nice -n 10 .venv/bin/python scripts/calibrate_paper.py            # full budget, the freeze
    .venv/bin/python scripts/calibrate_paper.py --budget small --out /tmp/x.json   # quick check

Writes the frozen parameters with their provenance (observations, grid, every score, the set
of parameters that fit, the command, the date) to ``--out`` (default
``sim/calibrated/paper_testbed.json``). Only Flat-LB is ever simulated here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

from sim import fit

BUDGETS: dict[str, dict[str, Any]] = {
    # What this 2-core machine, shared with other work, could afford before the freeze.
    "full": {
        "scopes": ("conversation", "request"),
        "docs": (4,),
        "templates": (8, 16),
        "answers": (8.0, 16.0),
        "factors": (4.0, 5.0, 6.0),
        "seeds": (2, 3, 4),
        "horizon_s": 900.0,
    },
    "small": {
        "scopes": ("conversation",),
        "docs": (4,),
        "templates": (16,),
        "answers": (16.0,),
        "factors": (3.0,),
        "seeds": (2,),
        "horizon_s": 900.0,
    },
}


def _score(args: tuple[fit.WorkloadPoint, float]) -> fit.WorkloadFit:
    return fit.score_workload(args[0], horizon_s=args[1])


def _p99(args: tuple[dict[str, Any], float, int, float]) -> tuple[tuple[float, int, float], Any]:
    options, factor, seed, qps = args
    return (factor, seed, qps), fit.flat_p99(options, factor, seed, qps)


def calibrate(budget: dict[str, Any], jobs: int, log: Any = sys.stderr) -> dict[str, Any]:
    started = time.perf_counter()
    points = fit.workload_grid(
        budget["scopes"], budget["docs"], budget["templates"], budget["answers"]
    )
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        scored = sorted(
            pool.map(_score, [(p, budget["horizon_s"]) for p in points]), key=lambda f: f.chi2
        )
        best = scored[0]
        print(f"stage A: {len(points)} points, best {best.point} chi2 {best.chi2:.1f} "
              f"{best.hits} ({time.perf_counter() - started:.0f} s)", file=log)  # fmt: skip
        options = best.point.options()
        tasks = [
            (options, f, s, q)
            for f in budget["factors"]
            for s in budget["seeds"]
            for q in fit.STAGE_B_LADDER
        ]
        tasks.sort(key=lambda t: -t[3])  # the slow high rungs first: a short tail
        p99s: dict[float, dict[tuple[int, float], tuple[float, float, bool]]] = {}
        for (factor, seed, qps), value in pool.imap_unordered(_p99, tasks):
            p99s.setdefault(factor, {})[(seed, qps)] = value
    finally:
        pool.close()
        pool.join()
    engine_scores = [
        score
        for factor in budget["factors"]
        for score in fit.score_offsets(factor, p99s[factor], fit.offset_grid())
    ]
    feasible = [s for s in engine_scores if s.fits]
    chosen = min(feasible or engine_scores, key=lambda s: s.distance)
    print(f"stage B: {len(feasible)} feasible (factor, offset) pairs; chosen {chosen}", file=log)
    ranges: dict[str, list[float]] = {}
    for s in feasible:
        lo_hi = ranges.setdefault(f"{s.factor:g}", [s.offset_s, s.offset_s])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], s.offset_s), max(lo_hi[1], s.offset_s)
    return {
        "what": "paper-testbed calibration, fitted on the paper's Flat-LB observations ONLY",
        "frozen_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "nice -n 10 .venv/bin/python " + " ".join(sys.argv),
        "budget": {k: list(v) if isinstance(v, tuple) else v for k, v in budget.items()},
        "observations": {
            "hit": [list(o) for o in fit.HIT_OBSERVATIONS],
            "cap_3_5s_per_seed": list(fit.CAP35_PER_SEED),
            "cap_5s_mean": fit.CAP5_MEAN,
            "p99_at_100_s": fit.P99_AT_100,
            "fp16_kv_blocks": fit.KV_FP16,
            "fp16_kv_blocks_how": (
                "fp8: 40,071 x 16 tokens x 160 KiB = 105.1 GB KV + 70.6 GB fp8 weights per TP2 "
                "pair = 175.7 GB; fp16 weights 141.2 GB leave 34.5 GB / 320 KiB per token = "
                "105,111 tokens = 6,569 blocks"
            ),
        },
        "workload": options,
        "workload_fit": {"hits": best.hits, "z": best.z, "chi2": best.chi2, "fits": best.fits},
        "workload_scores": [
            {"point": f.point.options(), "hits": f.hits, "z": f.z, "chi2": f.chi2, "fits": f.fits}
            for f in scored
        ],
        "workload_set": [f.point.options() for f in scored if f.fits] or [options],
        "engine": {
            "slowdown": chosen.factor,
            "ttft_offset_ms": round(chosen.offset_s * 1000, 1),
            "fits": chosen.fits,
            "cap35_per_seed": list(chosen.cap35),
            "cap5_mean": chosen.cap5_mean,
            "p99_at_100_s": chosen.p99_100,
        },
        "engine_set": {"offset_s_range_by_factor": ranges},
        "flat_p99_without_offset": {
            f"{factor:g}": {f"{s}@{q:g}": list(v) for (s, q), v in sorted(table.items())}
            for factor, table in p99s.items()
        },
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=list(BUDGETS), default="full")
    parser.add_argument("--out", default=str(fit.FROZEN_FILE))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    document = calibrate(BUDGETS[args.budget], args.jobs)
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
