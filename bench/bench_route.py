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
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute.v1 import cluster_pb2, routing_pb2, routing_pb2_grpc, table_pb2
from cacheroute_state import Stores, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from dataplane.core.keys import hash_key
from dataplane.core.policies import Reason
from dataplane.core.table import PlannerParams, RoutingTable, make_table
from dataplane.core.table_codec import encode_table, params_to_proto
from servekit.grpc_server import GrpcServer
from servekit.processes import die_with_parent, free_port

NODES = [f"node-{i:02d}" for i in range(16)]
TABLE_KEYS = 1_000_000
REQUEST_KEYS = 50_000  # distinct keys the clients send (90% warm, 10% tail)
ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# (server CPU, client CPU) with --pin: both servers share one CPU, the client has the other, so the
# scheduler cannot favour one server by where it places it (unpinned, two identical bare servers
# differed by up to ±60 µs of CPU per call on the loaded 2-vCPU machine; pinned, by ±2 µs).
PIN: tuple[int, int] | None = None


def _start(cpu: int | None) -> Any:
    """A ``preexec_fn``: die with the parent, and run on ``cpu`` when pinning."""
    die = die_with_parent()

    def start() -> None:
        die()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return start


# -- tables and requests ------------------------------------------------------------------------


def key_names(count: int) -> list[str]:
    return [f"tenant-{i}" for i in range(count)]


def big_table(seed: int, hashes: np.ndarray) -> RoutingTable:
    """A 1M-key table, 1-3 destinations per key, placements drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    n = hashes.shape[0]
    sizes = rng.integers(1, 4, n)
    offsets = np.zeros(n + 1, dtype=np.uint32)
    np.cumsum(sizes, out=offsets[1:])
    first = rng.integers(0, len(NODES), n)
    members = np.empty(int(offsets[-1]), dtype=np.uint16)
    for j in range(3):  # member j of each set: first + j*5 (mod 16), sorted below
        has = sizes > j
        members[offsets[:-1][has] + j] = (first[has] + 5 * j) % len(NODES)
    for size in (2, 3):  # sort each set (sizes 2 and 3)
        rows = np.flatnonzero(sizes == size)
        idx = offsets[:-1][rows][:, None] + np.arange(size)
        members[idx] = np.sort(members[idx], axis=1)
    return make_table(
        pool="default",
        node_ids=NODES,
        key_hashes=hashes,
        set_offsets=offsets,
        set_members=members,
        params=PlannerParams(q_cap=10.0, slots_per_node=200_000, seed=seed),
        created_at_unix_ms=int(time.time() * 1000),
    )


def metadata_for(table: RoutingTable, size: int) -> table_pb2.PlanMetadata:
    return table_pb2.PlanMetadata(
        pool=table.pool, version=table.version, content_hash=table.content_hash,
        created_at_unix_ms=table.created_at_unix_ms, created_by="bench", source="import",
        params=params_to_proto(table.params), table_bytes=size,
    )  # fmt: skip


def requests_for(seed: int) -> list[routing_pb2.RouteRequest]:
    rng = np.random.default_rng(seed)
    warm = rng.zipf(1.2, REQUEST_KEYS) % TABLE_KEYS
    out = []
    for i, k in enumerate(warm):
        key = f"tenant-{int(k)}" if i % 10 else f"tail-{rng.integers(1 << 40)}"
        out.append(routing_pb2.RouteRequest(key=key, request_id=f"r{i}"))
    return out


def snapshot(seq: int) -> cluster_pb2.LoadSnapshot:
    rng = np.random.default_rng(seq)
    return cluster_pb2.LoadSnapshot(
        pool="default",
        seq=seq,
        observed_at_unix_ms=int(time.time() * 1000),
        nodes=[
            cluster_pb2.NodeLoad(
                node_id=n, address=f"10.0.0.{i}:8000", load=float(rng.integers(0, 20)),
                healthy=True,
            )
            for i, n in enumerate(NODES)
        ],
    )  # fmt: skip


# -- the bare server ----------------------------------------------------------------------------


class BareServicer(routing_pb2_grpc.RouterServiceServicer):
    """Returns one constant decision (and a constant batch of 1,000): the server stack's floor."""

    def __init__(self) -> None:
        self.decision = routing_pb2.RouteDecision(
            node_id="node-00", address="10.0.0.0:8000", reason=routing_pb2.ROUTE_REASON_WARM,
            version="p0123456789abcdef", generation=1, key_hash=1, key="tenant-1",
            policy="cacheroute",
        )  # fmt: skip
        self.batch = routing_pb2.RouteBatchResponse(decisions=[self.decision] * 1000)

    async def Route(self, request: Any, context: Any) -> routing_pb2.RouteDecision:  # noqa: N802
        return self.decision

    async def RouteBatch(self, request: Any, context: Any) -> routing_pb2.RouteBatchResponse:  # noqa: N802
        return self.batch


async def bare_server(listen: str) -> None:
    name = routing_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
    server = GrpcServer(listen, service_names=[name])
    routing_pb2_grpc.add_RouterServiceServicer_to_server(BareServicer(), server.server)
    await server.start()
    from servekit.grpc_server import run_until_signal  # noqa: PLC0415

    await run_until_signal(lambda: server.stop(1.0))


# -- the client ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of process ``pid`` so far (clock ticks: 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_seconds(pid: int) -> float:
    """CPU of the live threads of ``pid`` in ns resolution (schedstat): for idle figures."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError):
            total += int(stat.read_text().split()[0])
    return total / 1e9


async def client(
    target: str, mode: str, concurrency: int, duration: float, out: Path, cpu_pid: int = 0
) -> None:
    reqs = requests_for(seed=1)
    batch = routing_pb2.RouteBatchRequest(requests=reqs[:1000])
    async with grpc.aio.insecure_channel(target) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        starts: list[float] = []
        lats: list[float] = []
        decisions = 0

        async def worker(index: int, until: float, record: bool) -> None:
            nonlocal decisions
            i = index * 7919
            while time.monotonic() < until:
                t0 = time.monotonic()
                if mode == "batch":
                    await stub.RouteBatch(batch)
                    decisions += 1000
                else:
                    await stub.Route(reqs[i % len(reqs)])
                    i += 1
                if record:
                    starts.append(t0)
                    lats.append(time.monotonic() - t0)

        warm_until = time.monotonic() + 0.5
        await asyncio.gather(*(worker(i, warm_until, False) for i in range(concurrency)))
        decisions = 0
        cpu0 = cpu_seconds(cpu_pid) if cpu_pid else 0.0
        begin = time.monotonic()
        until = begin + duration
        await asyncio.gather(*(worker(i, until, True) for i in range(concurrency)))
        elapsed = time.monotonic() - begin
        cpu = cpu_seconds(cpu_pid) - cpu0 if cpu_pid else 0.0
    np.savez(
        out, starts=np.array(starts), lats=np.array(lats), elapsed=elapsed, decisions=decisions,
        cpu=cpu,
    )  # fmt: skip


def run_client(
    target: str, mode: str, concurrency: int, duration: float, cpu_pid: int = 0
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.npz"
        subprocess.run(
            [PY, __file__, "client", "--target", target, "--mode", mode,
             "--concurrency", str(concurrency), "--duration", str(duration), "--out", str(out),
             "--cpu-pid", str(cpu_pid)],
            check=True, preexec_fn=_start(PIN[1] if PIN else None),
        )  # fmt: skip
        data = np.load(out)
        return {k: data[k] for k in data.files}


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


async def publish_loads(stores: Stores, period: float) -> None:
    seq = 1
    while period > 0:
        seq += 1
        await stores.cluster.publish_load(snapshot(seq))
        await asyncio.sleep(period)


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


class PrometheusClientMetrics:
    """The alternative to ``router_metrics.PoolMetrics``: pre-bound prometheus_client children."""

    def __init__(self, counter: Any, histogram: Any, pool: str) -> None:
        self._children = {r: counter.labels(pool, "cacheroute", r.value) for r in Reason}
        self._observe = histogram.labels(pool).observe

    def decided(self, reason: Reason, seconds: float) -> None:
        self._children[reason].inc()
        self._observe(seconds)

    @staticmethod
    def factory() -> Any:
        from prometheus_client import CollectorRegistry, Counter, Histogram  # noqa: PLC0415

        registry = CollectorRegistry()
        counter = Counter("d", "d", ["pool", "policy", "reason"], registry=registry)
        histogram = Histogram("l", "l", ["pool"], registry=registry)
        return lambda pool: PrometheusClientMetrics(counter, histogram, pool)


def inprocess(table_bytes: bytes) -> dict[str, Any]:
    """Decision path cost with/without metrics; event-loop stall while a 1M table decodes."""
    from dataplane.core.decision_encoding import DecisionEncoder  # noqa: PLC0415
    from dataplane.core.route_input import parse_request  # noqa: PLC0415
    from dataplane.core.router import Router  # noqa: PLC0415
    from dataplane.core.table_codec import decode_table  # noqa: PLC0415
    from dataplane.sync.table_watcher import decode_for  # noqa: PLC0415
    from dataplane.telemetry.router_metrics import RouterMetrics  # noqa: PLC0415
    from dataplane.telemetry.sampler import Sampler  # noqa: PLC0415

    table = decode_table(table_bytes)
    reqs = requests_for(seed=2)[:20000]
    out: dict[str, Any] = {}
    variants = ("none", "plain", "prometheus_client")
    timings: dict[str, list[float]] = {v: [] for v in variants}
    for rnd in range(9):
        variant = variants[rnd % 3]
        metrics = RouterMetrics("cacheroute")
        factories: dict[str, Any] = {
            "none": None,
            "plain": metrics.for_pool,
            "prometheus_client": PrometheusClientMetrics.factory(),
        }
        router = Router(sampler=Sampler(0.01, router_id="bench"), pool_metrics=factories[variant])
        router.install_table("default", table, 1)
        router.apply_load(snapshot(1))
        encoder = DecisionEncoder("cacheroute")
        now = time.time()
        t0 = time.perf_counter()
        for q in reqs:
            inp = parse_request(q)
            encoder.encode_outcome(router.route(inp, now), inp.key_hash, inp.key, inp.request_id)
        timings[variant].append((time.perf_counter() - t0) / len(reqs) * 1e6)
    for variant in variants:
        out[f"decision_us_metrics_{variant}"] = float(np.median(timings[variant]))

    async def stall() -> float:
        worst = 0.0
        done = False

        async def ticker() -> None:
            nonlocal worst
            while not done:
                t = time.perf_counter()
                await asyncio.sleep(0.0005)
                worst = max(worst, time.perf_counter() - t - 0.0005)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        base = worst
        worst = 0.0
        started = time.perf_counter()
        await asyncio.to_thread(decode_for, table_bytes, "default", table.version)
        out["decode_ms"] = (time.perf_counter() - started) * 1000
        done = True
        await task
        out["idle_stall_ms"] = base * 1000
        return worst * 1000

    out["decode_max_loop_stall_ms"] = asyncio.run(stall())
    print(f"in-process {out}")
    return out


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
            procs.append(subprocess.Popen(
                [PY, "-m", "dataplane", "--listen", router_addr, "--redis-url", redis_server.url,
                 "--router-id", "bench-router", "--log-level", "warning", *args.router_args],
                env=env, preexec_fn=_start(PIN[0] if PIN else None),  # noqa: PLW1509
            ))  # fmt: skip
            procs.append(subprocess.Popen(
                [PY, __file__, "bare-server", "--listen", bare_addr],
                env=env, preexec_fn=_start(PIN[0] if PIN else None),  # noqa: PLW1509
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
    global PIN  # noqa: PLW0603 - read by the process starters
    PIN = args.pin if args.cmd is None else None
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
