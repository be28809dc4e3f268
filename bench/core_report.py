"""``bench_core.py``'s report: the machine, the table of figures against targets, the doc section.

``machine()`` is shared by the other benchmarks that print where they ran (``bench_replanner.py``,
``bench_shadow.py``).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench_core:begin -->", "<!-- bench_core:end -->"


def machine() -> dict[str, str]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    family = re.search(r"^cpu family\s*:\s*(\d+)$", cpuinfo, re.MULTILINE)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = model.group(1).strip() if model else platform.processor() or "unknown"
    if family:
        cpu += f" (family {family.group(1)})"
    return {
        "cpu": cpu,
        "cores": str(cores),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load": " / ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**missed**"


def us(ns: float) -> str:
    return f"{ns / 1000:.2f} µs"


def render(command: str, info: dict[str, str], res: dict[str, Any]) -> str:
    paper, big, dec, dcd = res["paper"], res["internet"], res["decision"], res["decode"]
    wl = paper["workload"]
    fast10 = big["fast"]
    cold, warm = fast10["times"][0], statistics.median(fast10["times"][1:] or fast10["times"])
    ref10 = big["ref"]
    ref10_time = f"{ref10['times'][0]:.1f} s" if ref10 else "not run (--quick)"
    ref10_mem = f"{ref10['peak_bytes'] / 2**30:.2f} GiB" if ref10 else "not run (--quick)"
    lines = [
        BEGIN,
        "## Routing core (`bench/bench_core.py`)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, "
        f"numpy {info['numpy']}, {info['date']}; load average when the run ended "
        f"{info['load']} (1/5/15 min; other work on the machine inflates the timings)",
        "",
        f"Workload: lognormal rates exp(σ·z), σ calibrated per sample to Gini 0.756. "
        f"128,824 keys: σ = {wl['sigma']:.4f}, achieved Gini {wl['gini']:.4f}, the top 4 % of "
        f"keys carry {wl['top4_share']:.1%} of requests (paper: ≈ 47 %), the largest key "
        f"{wl['max_share']:.3%} (paper: < 0.3 %). 10M keys: σ = {big['workload']['sigma']:.4f}, "
        f"Gini {big['workload']['gini']:.4f}. Total rate 0.8 · R · q_cap with q_cap = 4 req/s.",
        "",
        "| benchmark | CacheRoute | plain reference | target | |",
        "|---|---|---|---|---|",
        f"| planner, 128,824 keys, R = 30, W = 8 (median of {paper['fast_runs']} / "
        f"{paper['ref_runs']} builds) | {paper['fast_ms']:.2f} ms | {paper['ref_ms']:.1f} ms | "
        f"≤ 10 ms | {verdict(paper['fast_ms'], 10)} |",
        f"| planner, 10M keys, R = 1,000, W = 64: first build in a fresh process | {cold:.2f} s "
        f"| {ref10_time} | ≤ 3 s | {verdict(cold, 3)} |",
        f"| same, median of the next {len(fast10['times']) - 1} builds | {warm:.2f} s | | "
        f"≤ 3 s | {verdict(warm, 3)} |",
        f"| same, planner peak memory (peak RSS − RSS with inputs loaded) | "
        f"{fast10['peak_bytes'] / 2**20:.0f} MiB | {ref10_mem} | ≤ 2 GB | "
        f"{verdict(fast10['peak_bytes'], 2e9)} |",
        f"| same, planner peak memory (tracemalloc) | "
        f"{fast10['tracemalloc_peak_bytes'] / 2**20:.0f} MiB | | ≤ 2 GB | "
        f"{verdict(fast10['tracemalloc_peak_bytes'], 2e9)} |",
    ]
    for row in dec["rows"]:
        fast, ref = row["fast"], row["ref"]
        ok = fast["median_ns"] <= 5000 and fast["p99_ns"] <= 20000
        lines.append(
            f"| `cacheroute` decision, {row['table']}, {row['keys']}: median / p99 | "
            f"{us(fast['median_ns'])} / {us(fast['p99_ns'])} | "
            f"{us(ref['median_ns'])} / {us(ref['p99_ns'])} | ≤ 5 / ≤ 20 µs | "
            f"{'met' if ok else '**missed**'} |"
        )
    lines += [
        f"| decode + validate 1M keys, content hash verified (median of {dcd['runs']}) | "
        f"{dcd['verified_ms']:.1f} ms | {dcd['ref_ms']:.0f} ms (no hash) | ≤ 20 ms | "
        f"{verdict(dcd['verified_ms'], 20)} |",
        f"| decode + validate 1M keys, hash trusted | {dcd['trusted_ms']:.1f} ms | | ≤ 20 ms | "
        f"{verdict(dcd['trusted_ms'], 20)} |",
        f"| table memory, 1M keys: RoutingTable.nbytes | {dcd['nbytes'] / 1e6:.1f} MB | | "
        f"≤ 24 MB | {verdict(dcd['nbytes'], 24e6)} |",
        f"| table memory, 1M keys: tracemalloc, table kept (peak while decoding) | "
        f"{dcd['traced_bytes'] / 1e6:.1f} MB ({dcd['traced_peak_bytes'] / 1e6:.1f} MB) | "
        f"{dcd['ref_traced_bytes'] / 1e6:.0f} MB | ≤ 24 MB | "
        f"{verdict(dcd['traced_bytes'], 24e6)} |",
        "",
        "How it is measured:",
        "",
        "- Planner times are wall time of `build_plan` (input validation, admission, placement, "
        "table construction and content hash). The reference is checked to produce the same "
        "destination sets on the 128,824-key input.",
        "- 10M keys: each implementation runs in a fresh subprocess that loads the inputs from "
        ".npy files (160 MB: uint64 hashes and float64 rates); peak memory is the process's "
        "peak RSS (`VmHWM`, reset via /proc/self/clear_refs once the inputs are loaded and, for "
        "the reference, converted to Python lists) minus its RSS at that point, so it is what the "
        "builds add. `ru_maxrss` is not used: Linux carries the parent's high-water mark across "
        "fork/exec. The tracemalloc figure is the traced peak of one more build.",
        f"- Decisions: {dec['decisions']:,} calls after 10,000 warm-up calls, each timed with "
        f"`perf_counter_ns` around `policy.choose(Request(key), view)` + `view.record(node, now)`; "
        f"keys drawn by rate; a load snapshot every 2,500 decisions (not timed); the numbers "
        f"include the timer overhead of {dec['timer_overhead_ns']:.0f} ns. The planned table has "
        f"one destination per key (no key reaches q_cap at this utilisation), so the stress table "
        f"gives every key 4 destinations to time the least-loaded scan.",
        f"- Decode: `decode_table(bytes)` of a {dcd['snapshot_bytes'] / 1e6:.1f} MB snapshot "
        f"({dcd['keys']:,} keys, {dcd['members']:,} set members): protobuf parse, "
        "`frombuffer`, layout validation, and BLAKE2b over the content unless trusted. The "
        "reference unpacks every key into a dict of lists and validates in Python.",
        END,
    ]
    return "\n".join(lines) + "\n"


def update_doc(section: str) -> None:
    text = (
        DOC.read_text()
        if DOC.exists()
        else "# Benchmarks\n\nEach section is written by its script.\n"
    )
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOC.write_text(text)
