"""What the scale benchmarks share: N-destination tables, N-node load snapshots, changed plans.

``bench_scale.py`` and the tests that run its parts import these; ``bench_route.py`` keeps its own
16-destination fixtures (its numbers stay comparable with earlier runs).
"""

from __future__ import annotations

import time

import numpy as np

from cacheroute.v1 import cluster_pb2
from dataplane.core.load_columns import encode_columns
from dataplane.core.table import PlannerParams, RoutingTable, make_table


def node_ids(count: int) -> list[str]:
    return [f"engine-{i:05d}" for i in range(count)]


def table_for(hashes: np.ndarray, destinations: int, seed: int) -> RoutingTable:
    """Sorted unique ``hashes``, 1-3 distinct destinations per key drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    n = hashes.shape[0]
    sizes = rng.integers(1, min(3, destinations) + 1, n)
    offsets = np.zeros(n + 1, dtype=np.uint32)
    np.cumsum(sizes, out=offsets[1:])
    first = rng.integers(0, destinations, n)
    step = max(1, destinations // 3)
    members = np.empty(int(offsets[-1]), dtype=np.uint16)
    for j in range(3):  # member j: first + j*step (mod N): distinct for N >= 3
        has = sizes > j
        members[offsets[:-1][has] + j] = (first[has] + step * j) % destinations
    for size in (2, 3):
        rows = np.flatnonzero(sizes == size)
        idx = offsets[:-1][rows][:, None] + np.arange(size)
        members[idx] = np.sort(members[idx], axis=1)
    return make_table(
        pool="default", node_ids=node_ids(destinations), key_hashes=hashes,
        set_offsets=offsets, set_members=members,
        params=PlannerParams(q_cap=10.0, slots_per_node=200_000, seed=seed),
        created_at_unix_ms=int(time.time() * 1000),
    )  # fmt: skip


def changed(table: RoutingTable, share: float, seed: int) -> RoutingTable:
    """``table`` with ``share`` of its keys moved to another destination set (sizes kept), as
    a churn-aware replan that moved that share of keys does."""
    rng = np.random.default_rng(seed)
    destinations = len(table.node_ids)
    members = table.set_members.copy()
    offsets = table.set_offsets.astype(np.int64)
    rows = rng.choice(table.num_keys, int(table.num_keys * share), replace=False)
    shift = rng.integers(1, destinations, rows.shape[0])
    for j in range(3):  # shift every member of a moved row by the same amount, then re-sort
        has = offsets[rows + 1] - offsets[rows] > j
        at = offsets[rows[has]] + j
        members[at] = (members[at].astype(np.int64) + shift[has]) % destinations
    for size in (2, 3):
        picked = rows[offsets[rows + 1] - offsets[rows] == size]
        idx = offsets[picked][:, None] + np.arange(size)
        members[idx] = np.sort(members[idx], axis=1)
    return make_table(
        pool=table.pool, node_ids=table.node_ids, key_hashes=table.key_hashes,
        set_offsets=table.set_offsets, set_members=members,
        params=PlannerParams(q_cap=10.0, slots_per_node=200_000, seed=seed),
        created_at_unix_ms=int(time.time() * 1000),
    )  # fmt: skip


def load_snapshot(count: int, seq: int, *, columns: bool) -> cluster_pb2.LoadSnapshot:
    """A ``count``-node snapshot as the leader publishes it (``columns``: with NodeColumns)."""
    rng = np.random.default_rng(seq)
    loads = rng.integers(0, 20, count)
    nodes = [
        cluster_pb2.NodeLoad(
            node_id=node, address=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:8000",
            load=float(loads[i]), healthy=i % 97 != 0, age_ms=int(rng.integers(0, 2000)),
            running=float(loads[i]), kv_usage=0.5, weight=1.0,
        )
        for i, node in enumerate(node_ids(count))
    ]  # fmt: skip
    snapshot = cluster_pb2.LoadSnapshot(
        pool="default", seq=seq, leader_term=1, observed_at_unix_ms=int(time.time() * 1000),
        nodes=nodes,
    )  # fmt: skip
    if columns:
        snapshot.columns.CopyFrom(encode_columns(nodes))
    return snapshot
