"""Planned against reactive cache-aware routing on real engines: llama.cpp's ``llama-server``.

    .venv/bin/python bench/bench_real_engine.py
        [--arms flat,cacheroute,cacheroute_online,sglang,direct]
        [--engines 4 --slots 4 --context 8192 --tenants 16 --requests 40 --rate 2 --repeats 3]
        [--json docs/results/real_engine.json]
    .venv/bin/python bench/bench_real_engine.py --report A.json B.json   # one table of saved runs

N engines (``-np`` slots, ``-cram 0``: no RAM prompt cache, so capacity is counted in prefixes),
one agent each, a control plane and one router per arm, all up at once
(:mod:`tests.support.real_fleet`); a warm-up for live rates, a plan built from them and rolled
out, then the arms interleaved and repeated (:mod:`tests.support.real_bench`). An arm is a
router policy name (any in ``dataplane/core/policies/registry.py``, so a new policy is one more
name) or ``direct`` (round-robin over the engines, no router). Primary metric: the cached-token
share (``usage.prompt_tokens_details.cached_tokens`` / ``prompt_tokens``), cross-checked with the
engines' own counters (cached / (cached + processed)); secondary: client TTFT p50/p99, with the
load average and the client's schedule lag recorded. Needs the cached build
(``scripts/build_llamacpp.py``). Results: docs/results.md, "On a real engine".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.llamacpp import cached_binary
from tests.support.real_bench import run_benchmark
from tests.support.real_fleet import FleetSpec, RealFleet
from tests.support.real_workload import RunSummary, Workload

LABELS = {
    "flat": "Flat-LB",
    "cacheroute": "the plan (`cacheroute`)",
    "cacheroute_online": "`cacheroute_online`",
    "sglang": "SGLang-style (`sglang`)",
    "direct": "round-robin, no router",
}


def table(results: list[RunSummary]) -> list[str]:
    """One markdown row per arm: pooled cached share, per-repeat range, TTFT, load, lag."""
    by_arm: dict[str, list[RunSummary]] = defaultdict(list)
    for r in results:
        by_arm[r.arm].append(r)
    rows = [
        "| arm | cached share (pooled) | per repeat | engines' counters | TTFT p50 / p99 (s, "
        "median of repeats) | repeats × requests | failed | load avg | lag p99 (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, runs in by_arm.items():
        cached = sum(r.cached_tokens for r in runs)
        prompt = sum(r.prompt_tokens for r in runs)
        engine_c = sum(r.engine_cached for r in runs)
        engine_t = engine_c + sum(r.engine_processed for r in runs)
        each = ", ".join(f"{r.cached_share:.0%}" for r in runs)
        rows.append(
            f"| {LABELS.get(arm, f'`{arm}`')} | {cached / max(prompt, 1):.1%} | {each} | "
            f"{engine_c / max(engine_t, 1):.1%} | "
            f"{statistics.median(r.ttft_p50_s for r in runs):.2f} / "
            f"{statistics.median(r.ttft_p99_s for r in runs):.2f} | "
            f"{len(runs)} × {runs[0].requests} | {sum(r.failed for r in runs)} | "
            f"{statistics.mean(r.load_before for r in runs):.1f} | "
            f"{max(r.lag_p99_s for r in runs):.2f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default="flat,cacheroute,cacheroute_online,sglang,direct")
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument(
        "--context", type=int, default=8192, help="tokens, shared by an engine's slots"
    )
    parser.add_argument("--ram-cache-mib", type=int, default=0)
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--prefix-chars", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=40, help="per run")
    parser.add_argument("--rate", type=float, default=2.0, help="requests per second")
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds of warm-up traffic")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every run's summary here")
    parser.add_argument("--logs", type=Path, help="keep the processes' logs here")
    parser.add_argument(
        "--report", type=Path, nargs="+", help="print the table of saved --json files, run nothing"
    )
    args = parser.parse_args()
    if args.report:
        saved = [json.loads(path.read_text()) for path in args.report]
        print("\n".join(table([RunSummary(**r) for s in saved for r in s["runs"]])))
        return 0
    binary = cached_binary()
    if not binary.exists():
        print(f"no llama-server at {binary}: run scripts/build_llamacpp.py", file=sys.stderr)
        return 2
    arms = [a for a in args.arms.split(",") if a]
    spec = FleetSpec(
        engines=args.engines, slots=args.slots, context=args.context,
        ram_cache_mib=args.ram_cache_mib, policies=tuple(a for a in arms if a != "direct"),
    )  # fmt: skip
    workload = Workload(
        tenants=args.tenants, prefix_chars=args.prefix_chars, rate_per_s=args.rate,
        requests=args.requests, zipf_s=args.zipf,
    )  # fmt: skip
    logs = args.logs or Path(tempfile.mkdtemp(prefix="bench-real-engine-"))
    started = time.monotonic()

    async def run() -> list[RunSummary]:
        with RealFleet(spec, binary, logs) as fleet:
            fleet.start()
            await fleet.wait_ready(180.0)
            print(f"fleet up: {args.engines} engines x {args.slots} slots, {fleet.router_urls}")
            return await run_benchmark(
                fleet, arms, workload, repeats=args.repeats, warmup_s=args.warmup,
                seed=args.seed, say=print,
            )  # fmt: skip

    results = asyncio.run(run())
    print(f"\n{time.monotonic() - started:.0f} s; logs in {logs}\n")
    print("\n".join(table(results)))
    if args.json:
        runs = [asdict(r) for r in results]
        record = {"spec": asdict(spec), "workload": asdict(workload), "runs": runs}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
