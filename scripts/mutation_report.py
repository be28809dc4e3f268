"""Score the last mutmut run per module, net of the equivalent mutants listed in docs/mutation.md.

Reads ``mutmut results --all true`` (run from the project root after ``mutmut run``) and the
equivalent-mutant table of docs/mutation.md (rows ``| `module.x_fn__mutmut_N` | reason |``).
Prints one row per module; exits 1 when a survivor is neither killed nor listed as equivalent, or
when a listed equivalent is no longer a survivor (the list must stay true).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "mutation.md"
GOAL = 0.97
ROW = re.compile(r"^\|\s*`([\w.]+__mutmut_\d+)`\s*\|")
RESULT = re.compile(r"^\s*([\w.]+)\.(x\w+__mutmut_\d+): (.+)$")
CAUGHT = {"killed", "timeout", "segfault"}


def equivalents() -> set[str]:
    return {m.group(1) for line in DOC.read_text().splitlines() if (m := ROW.match(line))}


def results(mutmut: str) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        [mutmut, "results", "--all", "true"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for line in out.splitlines():
        if m := RESULT.match(line):
            module, mutant, status = m.groups()
            by_module[module][f"{module}.{mutant}"] = status.strip()
    return by_module


def main() -> int:
    mutmut = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / ".venv" / "bin" / "mutmut")
    listed = equivalents()
    by_module = results(mutmut)
    if not by_module:
        print("no mutmut results: run `make mutate` first", file=sys.stderr)
        return 1
    problems: list[str] = []
    print(f"{'module':<34} {'mutants':>7} {'killed':>6} {'equiv.':>6} {'survived':>8} {'score':>7}")
    for module in sorted(by_module):
        statuses = by_module[module]
        counts = Counter(statuses.values())
        caught = sum(counts[s] for s in CAUGHT)
        survivors = {m for m, s in statuses.items() if s not in CAUGHT}
        equivalent = survivors & listed
        unexplained = sorted(survivors - listed)
        problems += [f"survived, not listed as equivalent: {m}" for m in unexplained]
        real = len(statuses) - len(equivalent)
        score = caught / real if real else 1.0
        print(
            f"{module:<34} {len(statuses):>7} {caught:>6} {len(equivalent):>6} "
            f"{len(unexplained):>8} {score:>7.1%}"
        )
        if score < GOAL:
            problems.append(f"{module}: {score:.1%} of non-equivalent mutants killed < {GOAL:.0%}")
    every = {m: s for statuses in by_module.values() for m, s in statuses.items()}
    for mutant in sorted(listed):
        if mutant not in every:
            problems.append(f"listed as equivalent but no such mutant: {mutant}")
        elif every[mutant] in CAUGHT:
            problems.append(f"listed as equivalent but killed now: {mutant}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
