"""Router benchmark: `python -m dataplane` against a bare RouterService on the same server stack.

    .venv/bin/python bench/bench_route.py [--rounds 4] [--duration 3] [--runs 1] [--json OUT]

Processes: this orchestrator (Redis writes, table swaps), an embedded redis-server, the router
(``python -m dataplane``), the bare server (this file, ``bare-server``: ``servekit.GrpcServer`` with
a servicer that returns one constant ``RouteDecision``), and one load-generating client process per
measurement (this file, ``client``). Router and bare server are measured in the same run,
interleaved round by round (order alternating), and the latencies of all rounds are pooled.

Measured:

1. ``Route`` round trip p50/p99 at 1 and 16 concurrent callers (grpc.aio client, one channel).
2. ``RouteBatch`` decisions/s (batches of 1,000, two callers so the server is never idle).
3. ``Route`` p99 at 16 callers while 1,000,000-key tables are swapped in (the active pointer is
   moved A→B→A… every 2 s; a request counts as "during a swap" when it overlaps the interval from
   ``move_active`` to the router's ACK), against p99 of the same run outside the swap windows.
4. In-process: the decision path with and without metrics, and the longest event-loop stall
   while a 1M-key table is decoded and validated in a worker thread.
5. ``--parts cpu``: CPU time (user + system, all threads, from ``/proc/PID/stat``) the server
   process spends per ``Route`` at each caller count, and its CPU per second while idle. Unlike
   latency, this hardly moves when other jobs share the machine, so it finds what the router
   process costs beyond the bare server; add ``--pin 1,0`` so that both servers share one CPU and
   the client has the other (docs/benchmarks.md, "Route CPU per request").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import encode_table
from servekit.processes import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the route_* modules beside this script
import route_processes
from route_inprocess import inprocess
from route_processes import PY, bare_server, client, preexec_for
from route_rounds import cpu_rounds, latency_rounds, swap_run, wait_ack
from route_workload import TABLE_KEYS, big_table, key_names, metadata_for, snapshot

ROOT = Path(__file__).resolve().parent.parent


# -- the orchestrator ---------------------------------------------------------------------------


async def wait_serving(target: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{target} did not become SERVING")
            await asyncio.sleep(0.1)


async def publish_loads(stores: Stores, period: float) -> None:
    seq = 1
    while period > 0:
        seq += 1
        await stores.cluster.publish_load(snapshot(seq))
        await asyncio.sleep(period)


async def orchestrate(
    args: argparse.Namespace, tables: list[RoutingTable], blobs: list[bytes]
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    procs: list[subprocess.Popen[bytes]] = []
    with EmbeddedRedis() as redis_server:
        stores = open_stores(redis_server.url)
        try:
            for table, blob in zip(tables, blobs, strict=True):
                await stores.plans.put_plan(blob, metadata_for(table, len(blob)))
            await stores.plans.move_active(
                "default", tables[0].version, expected_generation=0, actor="bench",
                action="rollout",
            )  # fmt: skip
            await stores.cluster.publish_load(snapshot(1))
            loads = asyncio.create_task(publish_loads(stores, args.load_period))
            router_addr = f"127.0.0.1:{free_port()}"
            bare_addr = f"127.0.0.1:{free_port()}"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            server_cpu = route_processes.PIN[0] if route_processes.PIN else None
            procs.append(subprocess.Popen(
                [PY, "-m", "dataplane", "--listen", router_addr, "--redis-url", redis_server.url,
                 "--router-id", "bench-router", "--log-level", "warning", *args.router_args],
                env=env, preexec_fn=preexec_for(server_cpu),  # noqa: PLW1509
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [PY, __file__, "bare-server", "--listen", bare_addr],
                env=env, preexec_fn=preexec_for(server_cpu),  # noqa: PLW1509
            ))  # fmt: skip
            await wait_serving(router_addr)
            await wait_serving(bare_addr)
            await wait_ack(stores, 1)
            targets = {"bare": bare_addr, "router": router_addr}
            if "cpu" in args.parts:
                pids = {"router": procs[0].pid, "bare": procs[1].pid}
                results.update(await cpu_rounds(targets, pids, args))
            results.update(await latency_rounds(targets, args))
            versions = [t.version for t in tables]
            if "swap" in args.parts:
                results["swap"] = await swap_run(router_addr, stores, versions, args)
            loads.cancel()
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            await stores.close()
    results["machine"] = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
        "grpcio": grpc.__version__,
    }  # fmt: skip
    return results


def pool_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from ``--runs`` runs, each with its own router and bare server processes.

    Where the scheduler places a server's threads holds for the life of the process and moves the
    16-caller ratio by up to ±0.1 from one run to the next, so the per-round ratios and the
    ``RouteBatch`` rounds of all runs are pooled, and each run's own median is kept beside them.
    Everything else is the last run's.
    """
    pooled = dict(runs[-1])
    pooled["runs"] = len(runs)
    for key in [k for k in pooled if k.endswith("_ratio_rounds")]:
        rounds = [ratio for run in runs for ratio in run[key]]
        stem = key.removesuffix("_rounds")
        pooled[key] = rounds
        pooled[f"{stem}_median"] = float(np.median(rounds))
        pooled[f"{stem}_run_medians"] = [run[f"{stem}_median"] for run in runs]
    for key in [k for k in pooled if k.startswith("batch_")]:
        rounds = [value for run in runs for value in run[key]["rounds"]]
        pooled[key] = {"decisions_per_s": float(np.median(rounds)), "rounds": rounds}
    if len(runs) > 1:
        for key in [k for k in pooled if k.endswith("_ratio_median")]:
            medians = ", ".join(f"{m:.3f}" for m in pooled[key.replace("_median", "_run_medians")])
            print(f"{key} pooled over {len(runs)} runs {pooled[key]:.3f} (runs: {medians})")
    return pooled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    bare = sub.add_parser("bare-server")
    bare.add_argument("--listen", required=True)
    cl = sub.add_parser("client")
    cl.add_argument("--target", required=True)
    cl.add_argument("--mode", choices=("route", "batch"), required=True)
    cl.add_argument("--concurrency", type=int, required=True)
    cl.add_argument("--duration", type=float, required=True)
    cl.add_argument("--out", type=Path, required=True)
    cl.add_argument("--cpu-pid", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--runs", type=int, default=1,
        help="repeat everything with new server processes and pool the rounds (see pool_runs)",
    )  # fmt: skip
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--swaps", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--parts", default="inprocess,route,batch,swap", type=lambda v: v.split(","),
        help="comma-separated subset of inprocess,route,batch,swap,cpu",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print slow requests near swaps")
    parser.add_argument(
        "--pin", default=None, type=lambda v: tuple(int(x) for x in v.split(",")),
        help="SERVER_CPU,CLIENT_CPU: run router and bare server on one CPU, the client on another",
    )  # fmt: skip
    parser.add_argument("--load-period", type=float, default=0.25, help="snapshot period (0: off)")
    parser.add_argument(
        "--router-args", default=[], type=lambda v: v.split(), help="extra router flags"
    )
    parser.add_argument(
        "--concurrency", default="1,16", type=lambda v: [int(x) for x in v.split(",")],
        help="caller counts for the Route latency rounds",
    )  # fmt: skip
    args = parser.parse_args()
    route_processes.PIN = args.pin if args.cmd is None else None
    if args.cmd == "bare-server":
        asyncio.run(bare_server(args.listen))
    elif args.cmd == "client":
        asyncio.run(
            client(args.target, args.mode, args.concurrency, args.duration, args.out, args.cpu_pid)
        )
    else:
        started = time.time()
        hashes = np.unique(np.array([hash_key(k) for k in key_names(TABLE_KEYS)], dtype=np.uint64))
        tables = [big_table(seed, hashes) for seed in (1, 2)]
        blobs = [encode_table(t) for t in tables]
        results: dict[str, Any] = {"table_bytes": len(blobs[0]), "table_keys": tables[0].num_keys}
        if "inprocess" in args.parts:
            results["inprocess"] = inprocess(blobs[0])
        runs = [asyncio.run(orchestrate(args, tables, blobs)) for _ in range(args.runs)]
        results.update(pool_runs(runs))
        results["wall_s"] = time.time() - started
        text = json.dumps(results, indent=2, default=str)
        if args.json:
            args.json.write_text(text)
        print(text)


if __name__ == "__main__":
    main()
