"""Held-out comparison tables (issue 22): policies from several study JSONs, on common rungs.

    .venv/bin/python scripts/heldout_table.py --seeds 4,5,6 --rungs 100,140,160,180 --ref 100 \\
        docs/results/table1_testbed.json docs/results/table1_online_heldout.json

``<Q``: the seed failed the lowest rung Q (0 in the mean, marked ``≤``); ``≥Q``: it passed every
rung. Every run of every file is pooled (a policy may come from one file and its seeds from another;
``--label FILE=NAME`` renames a file's policies, e.g. a variant run under the same policy name;
``--shift S`` reads every p99 S seconds later, i.e. at another constant TTFT offset);
each seed's knee at each SLO is re-read on ``--rungs`` only (``sim.capacity.knee``), so policies
run on different ladders are compared on the same rungs. Prints a Markdown table: mean capacity
per SLO with the per-seed knees, and mean p99 TTFT, KV hit and imbalance at ``--ref`` QPS.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from sim.capacity import Rung, knee


def _knees(
    per_seed: dict[int, dict[float, dict[str, Any]]], seeds: list[int], slo: float
) -> tuple[float, list[tuple[float, str]]]:
    """Mean capacity and each seed's (knee, censoring mark) at one SLO."""
    knees = []
    for s in seeds:
        ladder = [Rung(q, r["ttft_p99_s"], r["failures"], r["aborted"])
                  for q, r in per_seed.get(s, {}).items()]  # fmt: skip
        k = knee(ladder, slo) if ladder else None
        mark = "" if k is None or k.censored is None else {"left": "<", "right": "≥"}[k.censored]
        knees.append((k.capacity if k else float("nan"), mark))
    return sum(c for c, _ in knees) / len(knees), knees


def _mean(runs: list[dict[str, Any]], field: str) -> float:
    return sum(r[field] for r in runs) / len(runs) if runs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--rungs", required=True)
    parser.add_argument("--ref", type=float, required=True)
    parser.add_argument("--slos", default="3.5,5")
    parser.add_argument("--label", action="append", default=[], metavar="FILE=NAME")
    parser.add_argument("--json", help="also write the table as JSON here")
    parser.add_argument("--shift", type=float, default=0.0,
                        help="add S seconds to every p99: another constant TTFT offset, "
                             "as scripts/offset_range.py reads one")  # fmt: skip
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rungs = {float(q) for q in args.rungs.split(",")}
    slos = [float(s) for s in args.slos.split(",")]
    labels = dict(item.split("=", 1) for item in args.label)
    runs: dict[str, dict[int, dict[float, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    order: list[str] = []
    for file in args.files:
        document = json.loads(Path(file).read_text())
        for run in document["runs"]:
            name = labels.get(file, run["policy"])
            if labels.get(file) and labels[file].startswith("+"):
                name = run["policy"] + labels[file]
            if run["seed"] in seeds and run["qps"] in rungs:
                shifted = run | {"ttft_p99_s": run["ttft_p99_s"] + args.shift}
                runs[name][run["seed"]][run["qps"]] = shifted
                if name not in order:
                    order.append(name)
    rows = []
    print("| policy | " + " | ".join(f"cap@{s:g}s (per seed)" for s in slos)
          + f" | p99@{args.ref:g} (s) | KV hit @{args.ref:g} | imbalance |")  # fmt: skip
    print("|---|" + "---|" * (len(slos) + 3))
    for name in order:
        per_seed = runs[name]
        missing = [s for s in seeds if set(per_seed.get(s, {})) != rungs]
        caps = [_knees(per_seed, seeds, slo) for slo in slos]
        ref = [per_seed[s][args.ref] for s in seeds if args.ref in per_seed.get(s, {})]
        p99, hit, imb = (_mean(ref, f) for f in ("ttft_p99_s", "kv_hit", "imbalance"))
        censored = any(r["p99_censored"] for r in ref)
        low = min(rungs)
        cells = [
            ("≤" if any(mk == "<" for _, mk in ks) else "")
            + f"{m:.0f} ({', '.join(f'<{low:g}' if mk == '<' else f'{mk}{c:g}' for c, mk in ks)})"
            for m, ks in caps
        ]
        note = f" (missing rungs for seeds {missing})" if missing else ""
        tail = f" | {'>' if censored else ''}{p99:.2f} | {100 * hit:.1f}% | {imb:.2f} |"
        print(f"| {name}{note} | " + " | ".join(cells) + tail)
        pairs = list(zip(slos, caps, strict=True))
        rows.append({"policy": name, "capacity": {f"{s:g}": m for s, (m, _) in pairs},
                     "knees": {f"{s:g}": [c for c, _ in ks] for s, (_, ks) in pairs},
                     "p99_ref_s": p99, "p99_censored": censored, "kv_hit_ref": hit,
                     "imbalance_ref": imb, "missing_seeds": missing})  # fmt: skip
    if args.json:
        table = {"seeds": seeds, "rungs": sorted(rungs), "ref_qps": args.ref, "rows": rows}
        Path(args.json).write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
