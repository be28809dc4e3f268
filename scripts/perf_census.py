"""Where a whole test suite's CPU goes, from a system-wide ``perf`` profile (issue 34).

    perf record -a -F 199 -g -o /tmp/suite.perf -- sleep 100000 &
    scripts/suite_cpu.sh census                      # the suite, alone on the machine
    pkill -INT -f "perf record -a"
    perf script -i /tmp/suite.perf -F comm,pid,ip,sym | python scripts/perf_census.py --hz 199

Prints the busy CPU seconds per process (the two test workers are the largest Python ones), and
how much of it went to the cyclic garbage collector and to page faults (the kernel zeroing fresh
memory), split into the largest Python processes and every other one. Leaf functions are the
sample's innermost frame; CPython frames are the interpreter's, not Python functions (3.11 has no
perf trampoline).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Iterator

GC_FRAMES = ("gc_collect", "visit_decref", "visit_reachable", "subtract_refs", "move_unreachable")
FAULT_FRAMES = ("asm_exc_page_fault", "exc_page_fault")


def samples(lines: Iterable[str]) -> Iterator[tuple[str, str, list[str]]]:
    """(command, pid, frames innermost first) per sample of ``perf script -F comm,pid,ip,sym``."""
    head: tuple[str, str] | None = None
    frames: list[str] = []
    for line in lines:
        if not line.strip():
            if head is not None and frames:
                yield head[0], head[1], frames
            head, frames = None, []
        elif line[0] not in " \t":
            fields = line.split()
            head, frames = (fields[0], fields[1]), []
        else:
            parts = line.split(None, 1)
            frames.append(parts[1].strip() if len(parts) > 1 else "?")
    if head is not None and frames:
        yield head[0], head[1], frames


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hz", type=float, default=199.0, help="perf record's -F")
    parser.add_argument("--top", type=int, default=2, help="Python processes shown apart")
    args = parser.parse_args(argv)
    busy: Counter[tuple[str, str]] = Counter()
    collector: Counter[tuple[str, str]] = Counter()
    faults: Counter[tuple[str, str]] = Counter()
    leaves: Counter[str] = Counter()
    for command, pid, frames in samples(sys.stdin):
        if command == "swapper":
            continue  # idle
        busy[command, pid] += 1
        leaves[f"{command}: {frames[0]}"] += 1
        if any(name.startswith(GC_FRAMES) for name in frames):
            collector[command, pid] += 1
        elif any(name in FAULT_FRAMES for name in frames):
            faults[command, pid] += 1
    python = [key for key, _ in busy.most_common() if key[0].startswith("python")]
    top = set(python[: args.top])

    def seconds(counts: Counter[tuple[str, str]], keys: Iterable[tuple[str, str]]) -> float:
        return sum(counts[key] for key in keys) / args.hz

    others = [key for key in python if key not in top]
    print(f"busy            {sum(busy.values()) / args.hz:8.1f} s")
    for label, keys in (("largest Python", top), ("other Python", others)):
        total, gc_s, fault_s = seconds(busy, keys), seconds(collector, keys), seconds(faults, keys)
        print(f"{label:15} {total:8.1f} s  (cyclic GC {gc_s:.1f} s, page faults {fault_s:.1f} s)")
    print("\nlargest processes:")
    for (command, pid), count in busy.most_common(8):
        print(f"  {count / args.hz:7.1f} s  {command} {pid}")
    print("\nlargest leaf functions:")
    for name, count in leaves.most_common(20):
        print(f"  {count / args.hz:7.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
