"""The route benchmarks' fixtures: a 1M-key table over 16 nodes, Zipf requests, load snapshots.

Shared by ``bench_route.py``, ``bench_handler.py`` and ``bench_table_alignment.py`` so that every
figure of the decision path is measured on the same table and the same requests.
"""

from __future__ import annotations

import time

import numpy as np

from cacheroute.v1 import cluster_pb2, routing_pb2, table_pb2
from dataplane.core.table import PlannerParams, RoutingTable, make_table
from dataplane.core.table_codec import params_to_proto

NODES = [f"node-{i:02d}" for i in range(16)]
TABLE_KEYS = 1_000_000
REQUEST_KEYS = 50_000  # distinct keys the clients send (90% warm, 10% tail)


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
