"""Capacities of a study JSON re-read at other constant TTFT offsets (the calibration's range).

A constant TTFT offset shifts every TTFT, hence every run's p99, by the same amount, so a study
run at the frozen offset gives its capacities at any other offset of the feasible set without
re-running: p99 + (offset - frozen). Runs that aborted stay failures (their p99 is a lower bound;
conservative for smaller offsets).

    .venv/bin/python scripts/offset_range.py STUDY.json --offsets 1.4,2.2
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from sim.capacity import Rung, capacity_across_seeds, format_interval
from sim.engine_model import PAPER_TESTBED_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("--offsets", required=True, help="offsets in seconds, comma-separated")
    args = parser.parse_args()
    doc = json.loads(Path(args.study).read_text())
    frozen = json.loads(PAPER_TESTBED_FILE.read_text())["engine"]["ttft_offset_ms"] / 1000.0
    slos = [float(s) for s in doc["slos"]]
    runs = defaultdict(list)
    for r in doc["runs"]:
        runs[(r["policy"], r["seed"])].append(r)
    policies = doc["policies"]
    for offset in (float(x) for x in args.offsets.split(",")):
        delta = offset - frozen
        print(f"offset {offset:g} s (frozen {frozen:g} s, shift {delta:+g} s)")
        for policy in policies:
            ladders = [
                [Rung(r["qps"], r["ttft_p99_s"] + delta, r["failures"], r["aborted"]) for r in rs]
                for (p, _), rs in sorted(runs.items())
                if p == policy
            ]
            cells = []
            for slo in slos:
                interval, _ = capacity_across_seeds(ladders, slo)
                cells.append(f"cap@{slo:g}s {format_interval(interval, lowest=doc['ladder'][0])}")
            print(f"  {policy:>10}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
