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

from soak_cluster import Cluster, rss_mib
from soak_http import Sample, http_load

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, routing_pb2, routing_pb2_grpc


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
