"""The cost of prefix-size sampling on the router's decision path (in process, A/B by tree).

    PYTHONPATH=<tree> .venv/bin/python bench/bench_prefix_sizes.py [--rounds 7] [--json OUT]

Times ``parse_request`` + ``Router.route`` + encode (the in-process part of bench_route.py) over
20,000 requests of three kinds: no prefix, 64 given ``prefix_blocks``, and a 4 KiB
``prompt_prefix`` (the HTTP front's case: the router hashes the prompt when it samples). Run it
with PYTHONPATH at a tree without sampling and at this one, alternating, to see the difference.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from cacheroute.v1 import cluster_pb2, routing_pb2
from dataplane.core.decision_encoding import DecisionEncoder
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router

NODES = 8


def requests(kind: str, n: int = 20_000) -> list[routing_pb2.RouteRequest]:
    rng = random.Random(1)
    out = []
    for i in range(n):
        key = f"tenant-{min(int(rng.paretovariate(1.2)), 5000)}"
        if kind == "blocks":
            blocks = [hash((key, b)) & (2**64 - 1) for b in range(60)] + [rng.getrandbits(64)] * 4
            out.append(routing_pb2.RouteRequest(key=key, request_id=f"r{i}", prefix_blocks=blocks))
        elif kind == "prompt":
            prompt = (key * 400)[:3900] + f"{i:0>196}"
            out.append(routing_pb2.RouteRequest(key=key, request_id=f"r{i}", prompt_prefix=prompt))
        else:
            out.append(routing_pb2.RouteRequest(key=key, request_id=f"r{i}"))
    return out


def snapshot() -> cluster_pb2.LoadSnapshot:
    nodes = [
        cluster_pb2.NodeLoad(node_id=f"n{i}", address=f"10.0.0.{i}:8000", load=1.0, healthy=True)
        for i in range(NODES)
    ]
    return cluster_pb2.LoadSnapshot(
        pool="default", seq=1, observed_at_unix_ms=int(time.time() * 1000), nodes=nodes
    )


def once(reqs: list[routing_pb2.RouteRequest]) -> float:
    router = Router()
    router.apply_load(snapshot())
    encoder = DecisionEncoder("cacheroute")
    now = time.time()
    t0 = time.perf_counter()
    for q in reqs:
        inp = parse_request(q)
        encoder.encode_outcome(router.route(inp, now), inp.key_hash, inp.key, inp.request_id)
    return (time.perf_counter() - t0) / len(reqs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    kinds = ("none", "blocks", "prompt")
    data = {kind: requests(kind) for kind in kinds}
    timings: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            timings[kind].append(once(data[kind]))
    result = {f"decision_us_{k}": statistics.median(v) for k, v in timings.items()}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out)


if __name__ == "__main__":
    main()
