"""The measurements of ``bench_route.py`` against running servers: latency, CPU and table swaps.

Router and bare server are measured round by round in alternating order, so that load drifting
over the run falls on both; each round is one client process (``route_processes.run_client``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np
from route_processes import run_client, run_seconds

from cacheroute_state import Stores


async def wait_ack(stores: Stores, generation: int, timeout: float = 30.0) -> float:
    """Monotonic time at which the router wrote its ACK of ``generation`` (polled every 50 ms,
    so the polling itself does not load the machine during a swap)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        acks = await stores.cluster.get_acks("default")
        for ack in acks:
            if ack.generation == generation and ack.accepted:
                wall_minus_mono = time.time() - time.monotonic()
                return ack.at_unix_ms / 1000.0 - wall_minus_mono
        await asyncio.sleep(0.05)
    raise TimeoutError(f"router did not ACK generation {generation}")


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) * 1e6 if values.size else float("nan")


async def latency_rounds(targets: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for concurrency in args.concurrency if "route" in args.parts else ():
        pooled: dict[str, list[np.ndarray]] = {name: [] for name in targets}
        rps: dict[str, list[float]] = {name: [] for name in targets}
        for rnd in range(args.rounds):
            order = list(targets) if rnd % 2 == 0 else list(reversed(targets))
            for name in order:
                r = await asyncio.to_thread(
                    run_client, targets[name], "route", concurrency, args.duration
                )
                pooled[name].append(r["lats"])
                rps[name].append(r["lats"].size / float(r["elapsed"]))
        for name in targets:
            lats = np.concatenate(pooled[name])
            results[f"route_c{concurrency}_{name}"] = {
                "p50_us": pct(lats, 50), "p99_us": pct(lats, 99), "n": int(lats.size),
                "rps": float(np.mean(rps[name])),
            }  # fmt: skip
            print(f"route c={concurrency:2d} {name:6s} {results[f'route_c{concurrency}_{name}']}")
        # Paired per round (bare and router measured back to back): robust to load drifting
        # over the run, which pooling is not.
        for q in (50, 99):
            ratios = [
                pct(r, q) / pct(b, q) for b, r in zip(pooled["bare"], pooled["router"], strict=True)
            ]
            results[f"route_c{concurrency}_p{q}_ratio_rounds"] = ratios
            results[f"route_c{concurrency}_p{q}_ratio_median"] = float(np.median(ratios))
        print(
            f"route c={concurrency:2d} per-round ratio median p50 "
            f"{results[f'route_c{concurrency}_p50_ratio_median']:.3f} p99 "
            f"{results[f'route_c{concurrency}_p99_ratio_median']:.3f}"
        )
    for rnd in range(args.rounds if "batch" in args.parts else 0):
        order = list(targets) if rnd % 2 == 0 else list(reversed(targets))
        for name in order:
            r = await asyncio.to_thread(run_client, targets[name], "batch", 2, args.duration)
            results.setdefault(f"batch_{name}", []).append(
                float(r["decisions"]) / float(r["elapsed"])
            )
    for name in targets if "batch" in args.parts else ():
        values = results[f"batch_{name}"]
        results[f"batch_{name}"] = {"decisions_per_s": float(np.median(values)), "rounds": values}
        print(f"batch {name:6s} {results[f'batch_{name}']}")
    return results


async def cpu_rounds(
    targets: dict[str, str], pids: dict[str, int], args: argparse.Namespace
) -> dict[str, Any]:
    """Server CPU per Route (µs) at each caller count, and idle CPU (ms per s), per round."""
    results: dict[str, Any] = {}
    idle: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(args.rounds):
        before = {name: run_seconds(pid) for name, pid in pids.items()}
        started = time.monotonic()
        await asyncio.sleep(args.duration)
        elapsed = time.monotonic() - started
        for name, pid in pids.items():
            idle[name].append((run_seconds(pid) - before[name]) / elapsed * 1000)
    for name in targets:
        results[f"cpu_idle_{name}_ms_per_s"] = float(np.median(idle[name]))
    for concurrency in args.concurrency:
        per_call: dict[str, list[float]] = {name: [] for name in targets}
        for rnd in range(args.rounds):
            order = list(targets) if rnd % 2 == 0 else list(reversed(targets))
            for name in order:
                r = await asyncio.to_thread(
                    run_client, targets[name], "route", concurrency, args.duration, pids[name]
                )
                per_call[name].append(float(r["cpu"]) / max(1, r["lats"].size) * 1e6)
        for name in targets:
            results[f"cpu_c{concurrency}_{name}_us_per_call"] = float(np.median(per_call[name]))
            results[f"cpu_c{concurrency}_{name}_rounds"] = per_call[name]
        bare = results[f"cpu_c{concurrency}_bare_us_per_call"]
        router = results[f"cpu_c{concurrency}_router_us_per_call"]
        results[f"cpu_c{concurrency}_ratio"] = router / bare
        print(f"cpu c={concurrency:2d} µs/call bare {bare:.1f} router {router:.1f}")
    print(f"cpu idle ms/s {[(n, results[f'cpu_idle_{n}_ms_per_s']) for n in targets]}")
    return results


async def swap_run(
    target: str, stores: Stores, versions: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    active = await stores.plans.get_active("default")
    assert active is not None
    generation = active.generation
    duration = 2.0 * args.swaps + 2.0
    client_task = asyncio.create_task(asyncio.to_thread(run_client, target, "route", 16, duration))
    await asyncio.sleep(2.5)  # client start-up + warm-up + a steady stretch
    windows: list[tuple[float, float]] = []
    for i in range(args.swaps):
        version = versions[(generation + 1) % 2]
        moved_at = time.monotonic()
        await stores.plans.move_active(
            "default", version, expected_generation=generation, actor="bench", action="rollout"
        )
        generation += 1
        acked = await wait_ack(stores, generation)
        windows.append((moved_at, acked))
        if i < args.swaps - 1:
            await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - moved_at)))
    r = await client_task
    starts, lats = r["starts"], r["lats"]
    ends = starts + lats
    during = np.zeros(starts.size, dtype=bool)
    quiet = np.ones(starts.size, dtype=bool)
    for lo, hi in windows:
        during |= (ends >= lo) & (starts <= hi)
        quiet &= (ends < lo - 0.3) | (starts > hi + 0.3)
    quiet &= starts > starts[0] + 0.5
    quiet &= starts < windows[-1][1] + 1.0
    swap_ms = [(hi - lo) * 1000 for lo, hi in windows]
    if args.verbose:
        for lo, hi in windows:
            near = (starts > lo - 0.2) & (starts < hi + 0.2)
            for s_, l_ in zip(starts[near], lats[near], strict=True):
                if l_ > 0.015:
                    offset, window = (s_ - lo) * 1000, (hi - lo) * 1000
                    print(f"  +{offset:7.1f} ms (window {window:.0f} ms): {l_ * 1e3:.1f} ms")
    out = {
        "swaps": len(windows),
        "swap_ms_median": float(np.median(swap_ms)),
        "swap_ms_max": float(np.max(swap_ms)),
        "during_p50_us": pct(lats[during], 50), "during_p99_us": pct(lats[during], 99),
        "during_max_us": pct(lats[during], 100), "during_n": int(during.sum()),
        "steady_p50_us": pct(lats[quiet], 50), "steady_p99_us": pct(lats[quiet], 99),
        "steady_n": int(quiet.sum()),
    }  # fmt: skip
    print(f"swap {out}")
    return out
