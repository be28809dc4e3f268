"""cachectl start-up time: `--help` and the offline plan commands, against a bare interpreter.

    .venv/bin/python bench/bench_cli_startup.py [--runs 15]

Each command runs ``--runs`` times as a fresh process (the console script's interpreter); the
table gives the median and the worst wall time, next to ``python -c pass`` measured in the same
run (the floor no CLI can go below). Issue 10's budget: under 0.3 s for `--help` and offline
commands.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(argv: list[str], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times), max(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "cachectl"]
    with tempfile.TemporaryDirectory() as tmp:
        rates = Path(tmp) / "rates.csv"
        rates.write_text("key,rate\n" + "".join(f"k{i},{i + 1}\n" for i in range(100)))
        plan = Path(tmp) / "plan.bin"
        build = ["plan", "build", "--rates", str(rates), "--nodes", "a,b,c,d", "--q-cap", "500",
                 "--slots-per-node", "8", "--out", str(plan)]  # fmt: skip
        subprocess.run([*cli, *build], check=True, capture_output=True)
        cases = {
            "python -c pass (baseline)": [sys.executable, "-c", "pass"],
            "cachectl --help": [*cli, "--help"],
            "cachectl --version": [*cli, "--version"],
            "cachectl plan build --rates": [*cli, *build],
            "cachectl plan show FILE": [*cli, "plan", "show", str(plan)],
            "cachectl plan route FILE": [*cli, "plan", "route", str(plan), "--key", "k9"],
            "cachectl sim --help": [*cli, "sim", "--help"],
        }
        print(f"{platform.node()} {platform.processor() or platform.machine()}, "
              f"Python {platform.python_version()}, {args.runs} runs each")  # fmt: skip
        print(f"{'command':34} {'median s':>9} {'max s':>7}")
        for name, argv in cases.items():
            median, worst = wall(argv, args.runs)
            print(f"{name:34} {median:9.3f} {worst:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
