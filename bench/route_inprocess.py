"""The in-process part of ``bench_route.py``: the decision path's cost and the decode's loop stall.

Measured without gRPC or a second process: the decision with no metrics, with the router's own
metrics and with ``prometheus_client`` children, and the longest event-loop stall while a 1M-key
table is decoded and validated in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from route_workload import requests_for, snapshot

from dataplane.core.policies import Reason


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
