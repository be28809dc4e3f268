"""The Route handler's own cost, in-process: ``RouterServicer.Route`` awaited back to back.

    .venv/bin/python bench/bench_handler.py [--batches 300]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/bench_handler.py   # A/B

What gRPC does not do: parsing the request bytes, validation, the decision (policy, in-flight
record, traffic count, sampling, metrics) and encoding the answer, on a 200,000-key
table over 16 nodes with the requests of ``bench_route.py`` (Zipf keys, 10 % not in the table).
Timed in batches of 2,000 requests; the 10th percentile over batches is the figure to compare on a
shared machine (the median moves with whatever else runs). To compare two trees, alternate runs of
each (the tables and requests are imported from the tree under test, so both see the same).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import dataplane
from dataplane.core.keys import hash_key
from dataplane.core.router import Router
from dataplane.router_metrics import RouterMetrics
from dataplane.sampler import Sampler
from dataplane.servicer import RouterServicer

TREE = Path(dataplane.__file__).resolve().parent.parent
sys.path.insert(0, str(TREE / "bench"))
import bench_route  # noqa: E402

BATCH = 2000


async def timed(servicer: RouterServicer, requests: list[Any], batches: int) -> np.ndarray:
    route = servicer.Route
    out = []
    for i in range(batches):
        start = (i % (len(requests) // BATCH)) * BATCH
        batch = requests[start : start + BATCH]
        t0 = time.perf_counter()
        for request in batch:
            await route(request, None)  # type: ignore[arg-type]
        out.append((time.perf_counter() - t0) / len(batch) * 1e6)
    return np.array(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    keys = bench_route.key_names(200_000)
    hashes = np.unique(np.array([hash_key(k) for k in keys], dtype=np.uint64))
    metrics = RouterMetrics("cacheroute")
    router = Router(sampler=Sampler(0.01, router_id="bench"), pool_metrics=metrics.for_pool)
    router.install_table("default", bench_route.big_table(1, hashes), 1)
    router.apply_load(bench_route.snapshot(1))
    # The handler parses the request bytes itself (since issue 9: malformed bytes get
    # INVALID_ARGUMENT, not UNKNOWN), so the timing includes the protobuf parse gRPC did before.
    requests = [r.SerializeToString() for r in bench_route.requests_for(1)]
    servicer = RouterServicer(router, metrics, "cacheroute")
    per_request = asyncio.run(timed(servicer, requests[:20_000], args.batches))
    print(
        f"{TREE}: servicer.Route p10 {np.percentile(per_request, 10):.2f} µs, "
        f"median {np.median(per_request):.2f} µs per request ({args.batches} batches)"
    )


if __name__ == "__main__":
    main()
