"""Markdown tables of capacity-study JSONs (``cachectl sim capacity --out``) for docs/results.md.

    .venv/bin/python scripts/study_tables.py STUDY.json            # the paper-like table
    .venv/bin/python scripts/study_tables.py --routers A.json B.json C.json

The first form prints the table ``cachectl sim capacity`` prints, as Markdown, then each policy's
per-seed knees. ``--routers`` puts studies that differ only in ``--routers`` side by side: per
policy, the KV hit at the reference QPS and the capacity at each SLO against router count.
``--rungs Q1,Q2`` first re-summarises every study from its runs on those rungs only, so studies
run on different ladders are compared on the same one.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from sim.report import summarize_policies, table_rows
from sim.run_results import RunMetrics
from sim.study import RunRecord


def _load(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(Path(path).read_text())
    return doc


def on_rungs(doc: dict[str, Any], rungs: set[float]) -> dict[str, Any]:
    """``doc`` re-summarised from its runs on ``rungs`` only (every rung must have been run)."""
    missing = rungs - {float(q) for q in doc["ladder"]}
    if missing:
        raise SystemExit(f"rungs {sorted(missing)} were not run in this study")
    names = {f.name for f in fields(RunMetrics)}
    records = [
        RunRecord(
            r["policy"], r["seed"], r["qps"], RunMetrics(**{k: r[k] for k in names}), r["wall_s"]
        )
        for r in doc["runs"]
        if float(r["qps"]) in rungs
    ]
    slos = [float(s) for s in doc["slos"]]
    results = summarize_policies(records, slos, float(doc["ref_qps"]))
    return doc | {"ladder": sorted(rungs), "results": results}


def _markdown(headers: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _rows(doc: dict[str, Any]) -> tuple[list[str], list[list[object]]]:
    slos = [float(s) for s in doc["slos"]]
    return table_rows(doc["results"], slos, float(doc["ref_qps"]))


def study_table(doc: dict[str, Any]) -> str:
    headers, rows = _rows(doc)
    knees = []
    for result in doc["results"]:
        per_seed = " / ".join(
            ", ".join(f"{k:g}" for k in result["capacity_per_seed"][slo]) for slo in doc["slos"]
        )
        knees.append(f"{result['policy']} {per_seed}")
    settings = doc["settings"]
    head = (
        f"{doc['workload']}, {settings['nodes']} x {settings['profile']}, {settings['routers']} "
        f"router(s), q_cap {settings['q_cap']:.3f}, seeds {','.join(map(str, doc['seeds']))}, "
        f"ladder {','.join(f'{q:g}' for q in doc['ladder'])}, {doc['elapsed_s'] / 60:.1f} min wall"
    )
    slos = ", ".join(f"{s} s" for s in doc["slos"])
    return (
        f"{head}\n\n{_markdown(headers, rows)}\n\nPer-seed knees at {slos}: "
        + "; ".join(knees)
        + "."
    )


def routers_table(docs: list[dict[str, Any]]) -> str:
    docs = sorted(docs, key=lambda d: int(d["settings"]["routers"]))
    counts = [int(d["settings"]["routers"]) for d in docs]
    slos = docs[0]["slos"]
    ref = docs[0]["ref_qps"]
    headers = ["policy", f"KV hit @{ref} ({' / '.join(map(str, counts))} routers)"]
    headers += [f"cap@{s}s ({' / '.join(map(str, counts))})" for s in slos]
    headers += [f"p99@{ref} (s)"]
    shown = [d["policies"] for d in docs]
    policies = [p for p in shown[-1] if all(p in s for s in shown)]
    formatted = [dict(zip((r[0] for r in _rows(d)[1]), _rows(d)[1], strict=True)) for d in docs]
    rows: list[list[object]] = []
    for policy in policies:
        cells = [formatted[i][policy] for i in range(len(docs))]
        row: list[object] = [policy, " / ".join(str(c[1]) for c in cells)]
        row.extend(" / ".join(str(c[2 + j]) for c in cells) for j in range(len(slos)))
        row.append(" / ".join(str(c[2 + len(slos)]) for c in cells))
        rows.append(row)
    return _markdown(headers, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="+")
    parser.add_argument("--routers", action="store_true", help="compare router counts")
    parser.add_argument("--rungs", help="re-summarise on these rungs only (comma-separated)")
    args = parser.parse_args()
    docs = [_load(p) for p in args.studies]
    if args.rungs:
        docs = [on_rungs(d, {float(q) for q in args.rungs.split(",")}) for d in docs]
    if args.routers:
        print(routers_table(docs))
        return
    for doc in docs:
        print(study_table(doc))
        print()


if __name__ == "__main__":
    main()
