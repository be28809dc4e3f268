"""Soak: a steady Route rate for a long time, with plan rollouts and live load snapshots.

    .venv/bin/python bench/bench_soak.py [--duration 1800] [--rate 200] [--http-rate 10]
                                         [--bucket 60] [--rollout-every 20] [--json OUT]
    .venv/bin/python bench/bench_soak.py --ci          # 20 s, 5 s buckets, a rollout every 3 s

Processes (all on 127.0.0.1): an embedded redis-server, ``python -m controlplane``, four
simulated engines (``python -m simengine``, one process), their agents (``python -m agents``) and
one router (``python -m dataplane``) with its OpenAI HTTP front on. This process sends ``Route``
calls at ``--rate`` per second (keys Zipf(1.1) over 2,000 tenants, 8 concurrent callers on one
channel), chat completions through the front at ``--http-rate`` per second (the real ``openai``
client, streamed and not, five business keys: bench/soak_http.py), and every ``--rollout-every``
seconds asks the control plane to build a plan from the live rates and rolls it out. Per bucket:
Route and HTTP calls, errors and p50/p99 latency, router and control-plane RSS. The claims a soak
checks: **errors = 0** on both doors, p99 flat, RSS levels off (last bucket vs the first after
warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from soak_http import Sample, http_load, served_model

from cachectl.localcluster.processes import ManagedProcess, logged_values, python_module, stop_all
from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc
from cacheroute_state.embedded import EmbeddedRedis

HOST = "127.0.0.1"
LOG = ("--log-format", "json", "--log-level", "warning")


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def logged(proc: ManagedProcess, event: str, field: str, count: int = 1) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        proc.check()
        found = logged_values(proc.log_path, event, field)
        if len(found) >= count:
            return found[:count]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} did not log {event!r}")
        await asyncio.sleep(0.1)


class Cluster:
    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.redis = EmbeddedRedis().start()
        self.procs: list[ManagedProcess] = []
        info = [*LOG[:2], "--log-level", "info"]
        self.cp = self._start(
            "controlplane",
            "controlplane",
            "--listen",
            f"{HOST}:0",
            "--redis-url",
            self.redis.url,
            "--metrics-listen",
            "",
            *info,
        )
        self.engines = self._start(
            "engines",
            "simengine",
            *[a for _ in range(4) for a in ("--listen", f"{HOST}:0")],
            "--speedup",
            "20",
            *info,
        )
        self.router = self._start("router", "dataplane", "--listen", f"{HOST}:0", "--redis-url",
                                  self.redis.url, "--router-id", "soak", "--metrics-listen", "",
                                  "--report-interval", "2", "--http-listen", f"{HOST}:0",
                                  *info)  # fmt: skip
        self.cp_address = self.router_address = self.front_url = self.model = ""

    def _start(self, name: str, module: str, *args: str) -> ManagedProcess:
        proc = ManagedProcess(name, python_module(module, *args), self.log_dir).start()
        self.procs.append(proc)
        return proc

    async def ready(self) -> None:
        self.cp_address = (await logged(self.cp, "control plane serving", "listen"))[0]
        urls = await logged(self.engines, "engine serving", "url", 4)
        self.router_address = (await logged(self.router, "router serving", "address"))[0]
        self.front_url = "http://" + (await logged(self.router, "http front serving", "address"))[0]
        specs = [a for i, u in enumerate(urls) for a in ("--engine", f"sim-{i}={u}")]
        self._start("agents", "agents", "--controlplane", self.cp_address, *specs, *LOG)
        async with grpc.aio.insecure_channel(self.cp_address) as channel:
            nodes = admin_pb2_grpc.NodeServiceStub(channel)
            deadline = time.monotonic() + 60
            while True:
                reply = await nodes.ListNodes(admin_pb2.ListNodesRequest(pool="default"))
                if len(reply.nodes) == 4 and all(n.load.healthy for n in reply.nodes):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the engines never became healthy")
                await asyncio.sleep(0.2)
        await self._routing(deadline)
        self.model = await served_model(self.front_url, deadline)

    async def _routing(self, deadline: float) -> None:
        """Until the router answers: it learns the nodes from the next load snapshot and until
        then rightly says the pool has no destinations yet (a start-up wait, not an error)."""
        async with grpc.aio.insecure_channel(self.router_address) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            while True:
                try:
                    await stub.Route(routing_pb2.RouteRequest(key="ready"), timeout=5)
                    return
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        stop_all(list(reversed(self.procs)), grace_s=5.0)
        self.redis.stop()


async def load(
    address: str,
    rate: float,
    until: float,
    samples: list[Sample],
    errors: list[str],
) -> None:
    """Route calls at ``rate`` from 8 callers; the first 20 failures' codes go to ``errors``."""
    rng = random.Random(1)
    weights = np.array([1 / (k + 1) ** 1.1 for k in range(2000)])
    keys = [f"tenant-{k}" for k in rng.choices(range(2000), weights=list(weights), k=100_000)]
    interval = 8 / rate
    async with grpc.aio.insecure_channel(address) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)

        async def caller(n: int) -> None:
            next_at = time.monotonic() + n * interval / 8
            i = n
            while next_at < until:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                started = time.perf_counter()
                ok = True
                try:
                    await stub.Route(routing_pb2.RouteRequest(key=keys[i % len(keys)]), timeout=5)
                except grpc.aio.AioRpcError as exc:
                    ok = False
                    if len(errors) < 20:
                        errors.append(f"{exc.code().name}: {exc.details()}")
                samples.append((time.time(), time.perf_counter() - started, ok))
                next_at += interval
                i += 8

        await asyncio.gather(*(caller(n) for n in range(8)))


async def rollouts(address: str, every: float, until: float, log: list[dict[str, Any]]) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        plans = admin_pb2_grpc.PlanServiceStub(channel)
        while time.monotonic() + every < until:
            await asyncio.sleep(every)
            entry: dict[str, Any] = {"at": time.time()}
            try:
                built = await plans.BuildPlan(admin_pb2.BuildPlanRequest(pool="default"))
                version = built.metadata.version
                # past the shadow gate by name (audited): a soak tests the rollout path, not plans
                request = admin_pb2.RolloutRequest(
                    pool="default", version=version, skip_gates=["shadow"], reason="soak"
                )
                await plans.Rollout(request)
                entry["version"] = version
            except grpc.aio.AioRpcError as exc:
                entry["error"] = f"{exc.code().name}: {exc.details()}"
            log.append(entry)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = Cluster(Path(args.log_dir))
    try:
        await cluster.ready()
        samples: list[Sample] = []
        errors: list[str] = []
        http_samples: list[Sample] = []
        http_errors: list[str] = []
        rollout_log: list[dict[str, Any]] = []
        rss: list[tuple[float, float, float]] = []
        started = time.time()
        until = time.monotonic() + args.duration

        async def sample_rss() -> None:
            while time.monotonic() < until:
                rss.append((time.time(), rss_mib(cluster.router.pid), rss_mib(cluster.cp.pid)))
                await asyncio.sleep(args.bucket / 4)

        await asyncio.gather(
            load(cluster.router_address, args.rate, until, samples, errors),
            http_load(
                cluster.front_url, cluster.model, args.http_rate, until, http_samples, http_errors
            ),
            rollouts(cluster.cp_address, args.rollout_every, until, rollout_log),
            sample_rss(),
        )
        result = summarize(args, started, samples, http_samples, rollout_log, rss)
        return result | {"first_errors": errors, "first_http_errors": http_errors}
    finally:
        cluster.stop()


def summarize(
    args: argparse.Namespace,
    started: float,
    samples: list[Sample],
    http_samples: list[Sample],
    rollout_log: list[dict[str, Any]],
    rss: list[tuple[float, float, float]],
) -> dict[str, Any]:
    buckets = []
    for b in range(int(np.ceil(args.duration / args.bucket))):
        lo, hi = started + b * args.bucket, started + (b + 1) * args.bucket
        inside = [(lat, ok) for t, lat, ok in samples if lo <= t < hi]
        lat = np.array([x for x, _ in inside]) * 1e6 if inside else np.array([0.0])
        http = [(lat, ok) for t, lat, ok in http_samples if lo <= t < hi]
        http_ms = np.array([x for x, _ in http]) * 1e3 if http else np.array([0.0])
        mem = [(r, c) for t, r, c in rss if lo <= t < hi] or [(float("nan"),) * 2]
        buckets.append({
            "bucket": b, "calls": len(inside), "errors": sum(1 for _, ok in inside if not ok),
            "p50_us": round(float(np.percentile(lat, 50))),
            "p99_us": round(float(np.percentile(lat, 99))),
            "http_calls": len(http), "http_errors": sum(1 for _, ok in http if not ok),
            "http_p50_ms": round(float(np.percentile(http_ms, 50)), 1),
            "http_p99_ms": round(float(np.percentile(http_ms, 99)), 1),
            "router_rss_mib": round(max(r for r, _ in mem), 1),
            "controlplane_rss_mib": round(max(c for _, c in mem), 1),
        })  # fmt: skip
    return {
        "command": " ".join(sys.argv),
        "machine": f"{platform.machine()} Python {platform.python_version()}",
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
        "duration_s": args.duration, "rate": args.rate, "http_rate": args.http_rate,
        "calls": len(samples), "errors": sum(1 for _, _, ok in samples if not ok),
        "http_calls": len(http_samples),
        "http_errors": sum(1 for _, _, ok in http_samples if not ok),
        "rollouts": sum(1 for r in rollout_log if "version" in r),
        "rollout_errors": [r["error"] for r in rollout_log if "error" in r],
        "buckets": buckets,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--http-rate", type=float, default=10.0, help="chat completions per s")
    parser.add_argument("--bucket", type=float, default=60.0)
    parser.add_argument("--rollout-every", type=float, default=20.0)
    parser.add_argument("--ci", action="store_true", help="20 s, 5 s buckets, rollout every 3 s")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log-dir", default="/tmp/cacheroute-soak")
    args = parser.parse_args()
    if args.ci:
        args.duration, args.bucket, args.rollout_every = 20.0, 5.0, 3.0
    result = asyncio.run(run(args))
    print(f"calls {result['calls']}  errors {result['errors']}  http calls "
          f"{result['http_calls']}  http errors {result['http_errors']}  "
          f"rollouts {result['rollouts']}")  # fmt: skip
    print("bucket  calls  errors  p50_us  p99_us  http  http_err  http_p50_ms  http_p99_ms"
          "  router_MiB  cp_MiB")  # fmt: skip
    for b in result["buckets"]:
        row = (b["bucket"], b["calls"], b["errors"], b["p50_us"], b["p99_us"])
        print("{:6}  {:5}  {:6}  {:6}  {:6}".format(*row), end="")
        http = (b["http_calls"], b["http_errors"], b["http_p50_ms"], b["http_p99_ms"])
        print("  {:4}  {:8}  {:11}  {:11}".format(*http), end="")
        print(f"  {b['router_rss_mib']:10}  {b['controlplane_rss_mib']:6}")
    for error in result["first_errors"]:
        print("error:", error)
    for error in result["first_http_errors"]:
        print("http error:", error)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    http_ok = result["http_errors"] == 0 and (args.http_rate <= 0 or result["http_calls"] > 0)
    return 0 if result["errors"] == 0 and http_ok else 1


if __name__ == "__main__":
    sys.exit(main())
