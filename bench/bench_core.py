"""Benchmarks of the routing core, each against a plain reference written the obvious way.

    python bench/bench_core.py [--quick] [--no-write]

Measures (issue 2's targets in brackets) and writes the ``bench_core`` section of
docs/benchmarks.md:

1. planner, 128,824 keys with Gini-0.756 rates, R = 30, W = 8: median build [≤ 10 ms];
   reference: pure-Python sort over all keys + heapq placement.
2. planner, 10,000,000 keys, R = 1,000, W = 64 [≤ 3 s, ≤ 2 GB peak]: each implementation runs in
   a fresh subprocess that loads the inputs from .npy files; its peak is the process's peak RSS
   (VmHWM, reset after loading) minus its RSS after loading, plus a tracemalloc peak of one more
   build. (ru_maxrss is not used: Linux carries the parent's high-water mark across fork/exec.)
3. ``cacheroute`` decision on a 128,824-key table (policy.choose + view.record, as the router
   does) [median ≤ 5 µs, p99 ≤ 20 µs], each call timed with perf_counter_ns; reference: a dict
   key → list of node ids and min() over a dict of loads.
4. decode + validate a 1,000,000-key table [≤ 20 ms, ≤ 24 MB]; reference: per-key Python objects.

Rates are lognormal, exp(σ·z) for standard normal z, with σ calibrated by bisection on each
sample so its Gini is 0.756 (the paper's Table 6). Rates are scaled to 80 % of the cluster's
capacity: total = 0.8 · R · q_cap, with q_cap = 4 req/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.table_codec import decode_table, encode_table

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the core_* modules beside this script
from core_decisions import bench_decision
from core_references import reference_decode, reference_plan
from core_report import DOC, ROOT, machine, render, update_doc
from core_workload import PAPER_KEYS, Q_CAP, describe, workload

# -- measurement helpers ----------------------------------------------------------------------


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Wall time of each of ``repeat`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def rss_bytes(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (peak) of this process image from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0); False when the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def child_planner(inputs: Path, impl: str, repeat: int) -> dict[str, Any]:
    """Run in a fresh process: load the inputs, then build ``repeat`` times."""
    hashes, rates = np.load(inputs / "hashes.npy"), np.load(inputs / "rates.npy")
    nodes = [f"node-{i}" for i in range(1000)]
    if impl == "reference":
        hash_list, rate_list = hashes.tolist(), rates.tolist()  # the reference's input form
        del hashes, rates

        def run() -> object:
            return reference_plan(hash_list, rate_list, 1000, Q_CAP, 64)
    else:

        def run() -> object:
            return build_plan(PlanInput(hashes, rates, nodes, Q_CAP, 64))

    gc.collect()
    reset = reset_peak_rss()
    baseline = rss_bytes("VmRSS")
    times = timed(run, repeat)
    result: dict[str, Any] = {
        "times": times,
        "peak_bytes": rss_bytes("VmHWM") - baseline,
        "peak_reset": reset,
        "baseline_bytes": baseline,
    }
    if impl == "fast":
        tracemalloc.start()
        run()
        result["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result


def in_subprocess(inputs: Path, impl: str, repeat: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", impl, str(inputs), str(repeat)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- the benchmarks ---------------------------------------------------------------------------


def bench_planner_paper(quick: bool) -> dict[str, Any]:
    hashes, rates, sigma = workload(PAPER_KEYS, 30, seed=1)
    nodes = [f"node-{i}" for i in range(30)]
    plan_input = PlanInput(hashes, rates, nodes, Q_CAP, 8)
    table = build_plan(plan_input)
    hash_list, rate_list = hashes.tolist(), rates.tolist()
    reference = reference_plan(hash_list, rate_list, 30, Q_CAP, 8)
    ours = {int(h): table.members(i) for i, h in enumerate(table.key_hashes)}
    assert ours == reference, "planner and reference disagree"
    fast = timed(lambda: build_plan(plan_input), 50)
    ref = timed(lambda: reference_plan(hash_list, rate_list, 30, Q_CAP, 8), 3 if quick else 10)
    return {
        "workload": {**describe(rates), "sigma": sigma},
        "admitted": table.stats.admitted_keys,
        "imbalance": table.stats.planned_imbalance,
        "fast_ms": statistics.median(fast) * 1e3,
        "fast_runs": len(fast),
        "ref_ms": statistics.median(ref) * 1e3,
        "ref_runs": len(ref),
    }


def bench_planner_internet(quick: bool) -> dict[str, Any]:
    hashes, rates, sigma = workload(10_000_000, 1000, seed=2)
    stats = {**describe(rates), "sigma": sigma}
    with tempfile.TemporaryDirectory() as folder:
        inputs = Path(folder)
        np.save(inputs / "hashes.npy", hashes)
        np.save(inputs / "rates.npy", rates)
        del hashes, rates
        fast = in_subprocess(inputs, "fast", 3 if quick else 5)
        ref = None if quick else in_subprocess(inputs, "reference", 1)
    return {"workload": stats, "fast": fast, "ref": ref}


def bench_decode(quick: bool) -> dict[str, Any]:
    hashes, rates, _ = workload(1_000_000, 1000, seed=7)
    nodes = [f"node-{i}" for i in range(1000)]
    table = build_plan(PlanInput(hashes, rates, nodes, Q_CAP, 1100))
    assert table.num_keys == 1_000_000
    data = encode_table(table)
    del hashes, rates
    runs = 10 if quick else 30
    verified = timed(lambda: decode_table(data), runs)
    trusted = timed(lambda: decode_table(data, verify_hash=False), runs)
    ref = timed(lambda: reference_decode(data), 2 if quick else 3)
    gc.collect()
    tracemalloc.start()
    kept = decode_table(data)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracemalloc.start()
    ref_kept = reference_decode(data)
    ref_current = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del ref_kept
    return {
        "keys": kept.num_keys,
        "members": int(kept.set_members.shape[0]),
        "snapshot_bytes": len(data),
        "verified_ms": statistics.median(verified) * 1e3,
        "trusted_ms": statistics.median(trusted) * 1e3,
        "ref_ms": statistics.median(ref) * 1e3,
        "runs": runs,
        "nbytes": kept.nbytes,
        "traced_bytes": current,
        "traced_peak_bytes": peak,
        "ref_traced_bytes": ref_current,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, no 10M-key reference")
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    parser.add_argument(
        "--child", nargs=3, metavar=("IMPL", "INPUTS", "REPEAT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        impl, inputs, repeat = args.child
        print(json.dumps(child_planner(Path(inputs), impl, int(repeat))))
        return 0
    command = "python bench/bench_core.py" + (" --quick" if args.quick else "")
    results: dict[str, Any] = {}
    for name, bench in (
        ("paper", bench_planner_paper),
        ("internet", bench_planner_internet),
        ("decision", bench_decision),
        ("decode", bench_decode),
    ):
        started = time.perf_counter()
        results[name] = bench(args.quick)
        print(f"# {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    section = render(command, machine(), results)
    print(section)
    if not args.no_write:
        update_doc(section)
        print(f"updated {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
