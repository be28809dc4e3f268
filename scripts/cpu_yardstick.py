"""A fixed CPU workload: its CPU seconds say how fast this machine runs Python right now.

The suite's CPU seconds (``scripts/suite_cpu.sh``) moved by a quarter between two hours of one day
on a shared VM with no code change (the simulator's cache benchmark,
``.venv/bin/python bench/bench_kvcache_ab.py sim/kvcache.py --rounds 1``: the C cache 6.4-7.5 s
at 15:20 UTC, 9.3 s at 18:09, 2026-12-04). ``suite_cpu.sh`` runs this before and after the
suite, so a comparison between two runs can be read against the machine's speed at the time: the
same work, a fixed sequence of dict, string, integer and list operations like a test process's,
no I/O, no randomness.
"""

from __future__ import annotations

import time


def workload(rounds: int = 48) -> int:
    checksum = 0
    for r in range(rounds):
        table: dict[str, int] = {}
        for i in range(40_000):
            key = f"tenant-{(i * 7919 + r) % 5000}"
            table[key] = table.get(key, 0) + i
        ordered = sorted(table.items(), key=lambda item: (-item[1], item[0]))
        checksum ^= hash(tuple(ordered[:50])) & 0xFFFF
        checksum += sum(len(k) for k, _ in ordered[::97])
    return checksum


def main() -> None:
    """Print the median CPU seconds of three runs."""
    seconds = []
    for _ in range(3):
        started = time.process_time()
        workload()
        seconds.append(time.process_time() - started)
    print(f"{sorted(seconds)[1]:.2f}")


if __name__ == "__main__":
    main()
