"""Builders for tests of the pure Router (tests/core): load snapshots, tables naming destinations
by id, parsed requests and a fixed clock."""

from __future__ import annotations

import numpy as np

from cacheroute.v1 import cluster_pb2, routing_pb2
from dataplane.core.keys import hash_key
from dataplane.core.route_input import RouteInput, parse_request
from dataplane.core.table import PlannerParams, RoutingTable, make_table

NOW_MS = 1_800_000_000_000


def snapshot(
    nodes: list[tuple[str, float]] | list[tuple[str, float, bool, bool]],
    *,
    seq: int = 1,
    at_ms: int = NOW_MS,
    pool: str = "default",
) -> cluster_pb2.LoadSnapshot:
    entries = []
    for node in nodes:
        node_id, load, healthy, draining = (*node, True, False)[:4]  # type: ignore[misc]
        entries.append(
            cluster_pb2.NodeLoad(
                node_id=node_id,
                address=f"{node_id}.svc:8000",
                load=load,
                healthy=healthy,
                draining=draining,
            )
        )
    return cluster_pb2.LoadSnapshot(pool=pool, seq=seq, observed_at_unix_ms=at_ms, nodes=entries)


def table_for(
    keys: dict[str, list[str]], node_ids: list[str], pool: str = "default"
) -> RoutingTable:
    """A table that sends each key to the given destination ids."""
    rows = sorted(
        (hash_key(k), sorted(node_ids.index(n) for n in dests)) for k, dests in keys.items()
    )
    offsets = np.cumsum([0] + [len(m) for _, m in rows]).astype(np.uint32)
    return make_table(
        pool=pool,
        node_ids=node_ids,
        key_hashes=np.array([h for h, _ in rows], dtype=np.uint64),
        set_offsets=offsets,
        set_members=np.array([m for _, ms in rows for m in ms], dtype=np.uint16),
        params=PlannerParams(q_cap=1.0, slots_per_node=4),
        created_at_unix_ms=NOW_MS,
    )


def inp(key: str, pool: str = "default", **fields: object) -> RouteInput:
    return parse_request(routing_pb2.RouteRequest(key=key, pool=pool, **fields))  # type: ignore[arg-type]


NOW_S = NOW_MS / 1000 + 0.001
