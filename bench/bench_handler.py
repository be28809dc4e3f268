"""The Route handler's own cost, in-process: ``RouterServicer.Route`` awaited back to back.

    .venv/bin/python bench/bench_handler.py [--batches 300]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/bench_handler.py   # A/B
    .venv/bin/python bench/bench_handler.py --policies cacheroute,cacheroute_online  # same run
    .venv/bin/python bench/bench_handler.py --policies cacheroute,cacheroute_conversation
    .venv/bin/python bench/bench_handler.py --policies cacheroute,cacheroute_balanced  # the default

With ``--policies``, one router per policy on the same table, snapshot and requests, timed in
alternating batches (A, B, A, B, ...) so both see the same machine; a session-aware policy is
timed twice, without tokens (today's callers) and with every request carrying a valid session
token (every conversation echoing), and a third time with every request naming its conversation
(``session_id``, as the HTTP doors fill it), and the per-request differences from the first
policy are printed, with the doors' cost of deriving the conversation id from a chat body. This
mode times the thread's CPU, not wall time (see ``alternating``).

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
from dataplane.rpc.servicer import RouterServicer
from dataplane.telemetry.router_metrics import RouterMetrics
from dataplane.telemetry.sampler import Sampler

TREE = Path(dataplane.__file__).resolve().parent.parent
sys.path.insert(0, str(TREE / "bench"))
import route_workload  # noqa: E402

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


async def alternating(
    arms: list[tuple[str, RouterServicer, list[Any]]], batches: int
) -> dict[str, np.ndarray]:
    """Each arm's µs of this thread's CPU per request, batch by batch in turn.

    CPU time (``time.thread_time``), not wall time: on a machine shared with other jobs a batch's
    wall time includes the time the scheduler gave to them, while its CPU time does not.
    """
    out: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    for i in range(batches):
        for name, servicer, requests in arms:
            start = (i % (len(requests) // BATCH)) * BATCH
            batch = requests[start : start + BATCH]
            route = servicer.Route
            t0 = time.thread_time()
            for request in batch:
                await route(request, None)  # type: ignore[arg-type]
            out[name].append((time.thread_time() - t0) / len(batch) * 1e6)
    return {name: np.array(values) for name, values in out.items()}


def compare(policies: list[str], batches: int) -> None:
    """The ``--policies`` mode (module docstring)."""
    from dataplane.core.policies import POLICIES  # noqa: PLC0415
    from dataplane.core.session_token import encode  # noqa: PLC0415

    keys = route_workload.key_names(200_000)
    hashes = np.unique(np.array([hash_key(k) for k in keys], dtype=np.uint64))
    table = route_workload.big_table(1, hashes)
    plain = route_workload.requests_for(1)[:20_000]
    arms: list[tuple[str, RouterServicer, list[Any]]] = []
    for policy in policies:
        metrics = RouterMetrics(policy)
        router = Router(
            policy=policy, sampler=Sampler(0.01, router_id="bench"), pool_metrics=metrics.for_pool
        )
        router.install_table("default", table, 1)
        router.apply_load(route_workload.snapshot(1))
        servicer = RouterServicer(router, metrics, policy)
        arms.append((policy, servicer, [r.SerializeToString() for r in plain]))
        if POLICIES[policy].needs_session:
            nodes = route_workload.NODES
            tokened = []
            for i, r in enumerate(plain):
                echoed = type(r)()
                echoed.CopyFrom(r)
                echoed.session_token = encode("default", nodes[i % len(nodes)], 1)
                tokened.append(echoed.SerializeToString())
            arms.append((f"{policy}+tokens", servicer, tokened))
            conversations = []  # every request names its conversation (5,000 of them)
            for i, r in enumerate(plain):
                named = type(r)()
                named.CopyFrom(r)
                named.session_id = f"m:{i % 5_000:016x}"
                named.opening_turn = i % 4 == 0  # a quarter open their conversation (paper: 0.23)
                conversations.append(named.SerializeToString())
            arms.append((f"{policy}+session_id", servicer, conversations))
    per_request = asyncio.run(alternating(arms, batches))
    base = arms[0][0]
    base_p10 = float(np.percentile(per_request[base], 10))
    base_median = float(np.median(per_request[base]))
    print(f"{TREE}: servicer.Route, CPU per request, {batches} alternating batches of {BATCH}")
    print(f"  the HTTP doors' conversation id and opening flag of a 4 KiB first turn: "
          f"{identity_cost():.2f} µs")  # fmt: skip
    for name, values in per_request.items():
        p10, median = float(np.percentile(values, 10)), float(np.median(values))
        print(f"  {name:<28} p10 {p10:6.2f} µs (Δ {p10 - base_p10:+.2f})  "
              f"median {median:6.2f} µs (Δ {median - base_median:+.2f})")  # fmt: skip


def identity_cost(rounds: int = 20_000) -> float:
    """µs of thread CPU per ``conversation_id`` + ``opens_conversation`` of a chat whose first turn
    is ~4 KiB (a ~1,000-token system prompt and a question): what the HTTP doors add per request
    for the identity and the opening flag."""
    from dataplane.openai_api.conversation import (  # noqa: PLC0415
        conversation_id,
        opens_conversation,
    )

    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are ACME's assistant. " * 160},
            {"role": "user", "content": "Why was I charged twice this month?"},
            {"role": "assistant", "content": "Let me check."},
            {"role": "user", "content": "It was on May 3."},
        ],
    }
    t0 = time.thread_time()
    for _ in range(rounds):
        conversation_id(body, {}, "chat")
        opens_conversation(body, "chat")
    return (time.thread_time() - t0) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--policies", help="compare these policies in one run (comma-separated)")
    args = parser.parse_args()
    if args.policies:
        compare([p.strip() for p in args.policies.split(",") if p.strip()], args.batches)
        return
    keys = route_workload.key_names(200_000)
    hashes = np.unique(np.array([hash_key(k) for k in keys], dtype=np.uint64))
    metrics = RouterMetrics("cacheroute")
    router = Router(sampler=Sampler(0.01, router_id="bench"), pool_metrics=metrics.for_pool)
    router.install_table("default", route_workload.big_table(1, hashes), 1)
    router.apply_load(route_workload.snapshot(1))
    # The handler parses the request bytes itself (since issue 9: malformed bytes get
    # INVALID_ARGUMENT, not UNKNOWN), so the timing includes the protobuf parse gRPC did before.
    requests = [r.SerializeToString() for r in route_workload.requests_for(1)]
    servicer = RouterServicer(router, metrics, "cacheroute")
    per_request = asyncio.run(timed(servicer, requests[:20_000], args.batches))
    print(
        f"{TREE}: servicer.Route p10 {np.percentile(per_request, 10):.2f} µs, "
        f"median {np.median(per_request):.2f} µs per request ({args.batches} batches)"
    )


if __name__ == "__main__":
    main()
