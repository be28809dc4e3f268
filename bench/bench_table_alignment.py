"""The in-process decision with an aligned vs an unaligned view of a 1M-key table (A/B, one run).

    .venv/bin/python bench/bench_table_alignment.py [--rounds 3]

``bench_route.py``'s in-process loop (``parse_request`` + ``Router.route`` + encoding, 20,000
requests) on its 1M-key table, alternating round by round between the arrays as ``decode_table``
now returns them (aligned) and a zero-copy view at an odd offset (what it returned before when
protobuf placed a field there; numpy copies such a view on every ``searchsorted``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import route_workload

from dataplane.core.decision_encoding import DecisionEncoder
from dataplane.core.keys import hash_key
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable, make_table

G = TypeVar("G", bound=np.generic)


def unaligned(array: npt.NDArray[G]) -> npt.NDArray[G]:
    raw = b"\0" + array.tobytes()
    return np.frombuffer(raw, dtype=array.dtype, count=array.shape[0], offset=1)


def per_decision_us(table: RoutingTable, requests: list[object]) -> float:
    router = Router()
    router.install_table("default", table, 1)
    router.apply_load(route_workload.snapshot(1))
    encoder = DecisionEncoder("cacheroute")
    now = time.time()
    started = time.perf_counter()
    for request in requests:
        inp = parse_request(request)  # type: ignore[arg-type]
        encoder.encode_outcome(router.route(inp, now), inp.key_hash, inp.key, inp.request_id)
    return (time.perf_counter() - started) / len(requests) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = route_workload.key_names(route_workload.TABLE_KEYS)
    hashes = np.unique(np.array([hash_key(k) for k in names], dtype=np.uint64))
    aligned = route_workload.big_table(1, hashes)
    shifted = make_table(
        pool=aligned.pool, node_ids=aligned.node_ids, key_hashes=unaligned(aligned.key_hashes),
        set_offsets=unaligned(aligned.set_offsets), set_members=aligned.set_members,
        params=aligned.params, created_at_unix_ms=aligned.created_at_unix_ms,
    )  # fmt: skip
    requests: list[object] = list(route_workload.requests_for(seed=2)[:20000])
    results: dict[str, list[float]] = {"aligned (now)": [], "unaligned view (before)": []}
    for _ in range(args.rounds):
        for name, table in (("aligned (now)", aligned), ("unaligned view (before)", shifted)):
            results[name].append(per_decision_us(table, requests))
    for name, rounds in results.items():
        shown = ", ".join(f"{r:.1f}" for r in rounds)
        print(f"{name}: median {statistics.median(rounds):.1f} us/decision (rounds {shown})")


if __name__ == "__main__":
    main()
