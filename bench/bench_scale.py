"""The router at 1,000 engines: apply_load, the decision at 10,000 destinations, table rollouts.

    .venv/bin/python bench/bench_scale.py [--parts load,decision,rollout] [--rounds 5]

``load``: ``Router.apply_load`` of a 1,000-node snapshot, per call, by the per-node path (a
snapshot without columns: what every snapshot took before issue 33) and by the columns path,
interleaved round by round in one run, with 200 in-flight decisions recorded between snapshots.
``decision``: ``bench_route.py``'s in-process decision (``parse_request`` + ``Router.route`` +
encoding) over a 1M-key table whose sets name 30 or 10,000 destinations, each request timed on
its own, the two sizes interleaved round by round after one untimed pass each (the steady state:
each node's outcome tuple and the session tokens are built on first use). ``rollout``: bytes a
router fetches for a plan that moved 5% of a 1M-key table's keys, as a delta against the version
it holds vs the whole table, and the CPU to build and apply the delta.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import route_workload
import scale_fixtures

from dataplane.core.decision_encoding import DecisionEncoder
from dataplane.core.keys import hash_key
from dataplane.core.load_columns import encode_columns
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import decode_table, encode_table
from dataplane.core.table_delta import apply_delta, diff_tables
from dataplane.core.table_delta_codec import decode_delta, encode_delta
from servekit.gil import fast_switched

LOAD_NODES = 1000


def load_part(rounds: int) -> dict[str, float]:
    """Median µs per ``apply_load`` of a 1,000-node snapshot, both paths, one run."""
    keys = np.unique(np.array([hash_key(k) for k in route_workload.key_names(100_000)], np.uint64))
    table = scale_fixtures.table_for(keys, LOAD_NODES, seed=1)
    paths = {"per-node (no columns)": False, "columns": True}
    timings: dict[str, list[float]] = {name: [] for name in paths}
    seq = 0
    for rnd in range(rounds):
        order = list(paths.items()) if rnd % 2 == 0 else list(reversed(paths.items()))
        for name, columns in order:
            router = Router()
            router.install_table("default", table, 1)
            snapshots = [
                scale_fixtures.load_snapshot(LOAD_NODES, seq + i, columns=columns)
                for i in range(1, 42)
            ]
            seq += 41
            router.apply_load(snapshots[0])  # the membership: later calls keep it
            view_now = time.time()
            for snap in snapshots[1:]:
                view = router.pools["default"].view
                for i in range(200):  # in-flight decisions between two snapshots
                    view.record((i * 37) % LOAD_NODES, view_now)
                started = time.perf_counter()
                router.apply_load(snap, now=view_now + 1)
                timings[name].append((time.perf_counter() - started) * 1e6)
    out = {f"apply_load_us[{name}]": statistics.median(t) for name, t in timings.items()}
    plain = scale_fixtures.load_snapshot(LOAD_NODES, 1, columns=False)
    nodes = list(plain.nodes)
    started = time.perf_counter()
    for _ in range(20):
        columns = encode_columns(nodes)
    out["encode_columns_us"] = (time.perf_counter() - started) / 20 * 1e6
    plain.columns.CopyFrom(columns)
    out["snapshot_bytes"] = float(plain.ByteSize())
    print(f"snapshot of {LOAD_NODES} nodes: {plain.ByteSize():,} bytes with columns; the "
          f"publisher's encode_columns {out['encode_columns_us']:.0f} us")  # fmt: skip
    for name, t in timings.items():
        print(f"apply_load, {LOAD_NODES} nodes, {name}: median {statistics.median(t):.0f} us, "
              f"p90 {np.percentile(t, 90):.0f} us ({len(t)} calls)")  # fmt: skip
    return out


def _decision_router(table: RoutingTable, destinations: int) -> Router:
    router = Router()
    router.install_table("default", table, 1)
    router.apply_load(scale_fixtures.load_snapshot(destinations, 1, columns=True))
    return router


def decision_part(rounds: int) -> dict[str, float]:
    """p50 and mean µs per in-process decision at 30 and 10,000 destinations, one run."""
    hashes = np.unique(
        np.array(
            [hash_key(k) for k in route_workload.key_names(route_workload.TABLE_KEYS)], np.uint64
        )
    )
    sizes = (30, 10_000)
    routers = {n: _decision_router(scale_fixtures.table_for(hashes, n, seed=n), n) for n in sizes}
    requests = route_workload.requests_for(seed=2)[:20000]
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    clock = time.perf_counter
    for n in sizes:  # warm: each (node, reason) outcome and the session tokens built once
        encoder = DecisionEncoder("cacheroute")
        for q in requests:
            inp = parse_request(q)
            encoder.encode_outcome(routers[n].route(inp, time.time()), inp.key_hash, inp.key, "")
    for rnd in range(rounds):
        for n in sizes if rnd % 2 == 0 else tuple(reversed(sizes)):
            router, encoder, now = routers[n], DecisionEncoder("cacheroute"), time.time()
            got = samples[n]
            for q in requests:
                started = clock()
                inp = parse_request(q)
                outcome = router.route(inp, now)
                encoder.encode_outcome(outcome, inp.key_hash, inp.key, inp.request_id)
                got.append(clock() - started)
    out: dict[str, float] = {}
    for n in sizes:
        p50, mean = np.percentile(samples[n], 50) * 1e6, float(np.mean(samples[n])) * 1e6
        out[f"decision_p50_us[{n}]"], out[f"decision_mean_us[{n}]"] = p50, mean
        print(f"decision, {n} destinations: p50 {p50:.2f} us, p99 "
              f"{np.percentile(samples[n], 99) * 1e6:.2f} us, mean {mean:.2f} us "
              f"({len(samples[n])} decisions)")  # fmt: skip
    ratio = out["decision_p50_us[10000]"] / out["decision_p50_us[30]"]
    out["decision_p50_ratio"] = ratio
    print(f"decision p50 at 10,000 / at 30 destinations: {ratio:.2f}x (goal <= 1.5x)")
    return out


def loop_stall_ms(fn: Any, *args: Any) -> float:
    """The longest event-loop stall while ``fn(*args)`` runs in a worker thread, as the table
    watcher runs it (``fast_switched``): what the serving thread waits for the GIL."""

    async def measure() -> float:
        worst, done = 0.0, False

        async def ticker() -> None:
            nonlocal worst
            while not done:
                started = time.perf_counter()
                await asyncio.sleep(0.0005)
                worst = max(worst, time.perf_counter() - started - 0.0005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        worst = 0.0
        await asyncio.to_thread(fast_switched, fn, *args)
        done = True
        await task
        return worst * 1000

    return asyncio.run(measure())


def apply_bytes(base: RoutingTable, data: bytes) -> RoutingTable:
    """What the router's worker thread does with fetched delta bytes."""
    return apply_delta(base, decode_delta(data))


def rollout_part(rounds: int) -> dict[str, float]:
    """Bytes per router for a 5% change of a 1M-key, 1,000-destination plan; the CPU around it."""
    rng = np.random.default_rng(7)
    hashes = np.unique(rng.integers(1, 2**63, route_workload.TABLE_KEYS, dtype=np.uint64))
    base = scale_fixtures.table_for(hashes, LOAD_NODES, seed=1)
    target = scale_fixtures.changed(base, 0.05, seed=2)
    full = encode_table(target)
    times: dict[str, list[float]] = {
        "diff": [],
        "apply": [],
        "decode": [],
        "apply_stall": [],
        "decode_stall": [],
    }
    data = b""
    for _ in range(max(1, rounds // 2)):
        started = time.perf_counter()
        data = encode_delta(diff_tables(base, target))
        times["diff"].append(time.perf_counter() - started)
        started = time.perf_counter()
        rebuilt = apply_delta(base, decode_delta(data))
        times["apply"].append(time.perf_counter() - started)
        assert rebuilt.version == target.version
        started = time.perf_counter()
        decode_table(full)
        times["decode"].append(time.perf_counter() - started)
        times["apply_stall"].append(loop_stall_ms(apply_bytes, base, data) / 1000)
        times["decode_stall"].append(loop_stall_ms(decode_table, full) / 1000)
    out = {
        "table_bytes_full": float(len(full)),
        "table_bytes_delta": float(len(data)),
        "delta_share": len(data) / len(full),
        **{f"{name}_ms": statistics.median(t) * 1000 for name, t in times.items()},
    }
    print(f"rollout, 1M keys, 5% moved: whole table {len(full) / 1e6:.1f} MB, delta "
          f"{len(data) / 1e6:.2f} MB ({out['delta_share']:.1%} of it); control plane diff "
          f"{out['diff_ms']:.0f} ms, router apply {out['apply_ms']:.0f} ms (decode of the whole "
          f"table {out['decode_ms']:.0f} ms), medians of {len(times['diff'])}")  # fmt: skip
    print(f"longest serving-loop stall while the router applies the delta "
          f"{out['apply_stall_ms']:.1f} ms, while it decodes the whole table "
          f"{out['decode_stall_ms']:.1f} ms")  # fmt: skip
    return out


PARTS: dict[str, Any] = {"load": load_part, "decision": decision_part, "rollout": rollout_part}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="load,decision,rollout")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for part in args.parts.split(","):
        PARTS[part](args.rounds)


if __name__ == "__main__":
    main()
