"""Reads a ``LoadSnapshot`` into what a :class:`~dataplane.core.load_view.LoadView` applies.

Two paths, one result. A snapshot with columns (:mod:`dataplane.core.load_columns`) is read in a
few numpy calls, and its node messages are touched only when the membership digest differs from
the one the router holds. A snapshot without them (an older publisher) is read node by node, as
every snapshot was before. Either way an invalid snapshot (duplicate ids, a negative or NaN
load, columns that do not fit their nodes) raises ValueError before anything is applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cacheroute.v1 import cluster_pb2
from dataplane.core.load_columns import effective_addresses, read_columns
from dataplane.core.load_view import NodeSet

F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SnapshotRead:
    """A validated snapshot, aligned with ``nodes`` (the held NodeSet when unchanged)."""

    nodes: NodeSet
    loads: F64Array | list[float]
    healthy: BoolArray | list[bool]
    draining: BoolArray | list[bool]
    aged: list[int]  # nodes whose report was older than the bound when published


def read_snapshot(
    snapshot: cluster_pb2.LoadSnapshot, held: NodeSet, max_age_ms: float
) -> SnapshotRead:
    """``snapshot`` read against the membership ``held`` (module docstring)."""
    columns = read_columns(snapshot)
    if columns is None:
        return read_entries(snapshot, held, max_age_ms)
    nodes = held
    if columns.membership != held.digest or len(held) != len(snapshot.nodes):
        entries = snapshot.nodes
        ids = tuple(n.node_id for n in entries)
        nodes = _same_or_new(held, ids, effective_addresses(entries))
        if nodes.digest != columns.membership:
            raise ValueError("columns.membership does not match the snapshot's nodes")
    aged = np.flatnonzero(columns.age_ms > max_age_ms).tolist()
    return SnapshotRead(nodes, columns.loads, columns.healthy, columns.draining, aged)


def read_entries(
    snapshot: cluster_pb2.LoadSnapshot, held: NodeSet, max_age_ms: float
) -> SnapshotRead:
    """The per-node path (a snapshot without columns)."""
    entries = snapshot.nodes
    for n in entries:  # NaN compares false both ways: it would win every tie it starts
        if not (math.isfinite(n.load) and n.load >= 0):
            raise ValueError(f"node {n.node_id!r} has load {n.load}; loads are finite, >= 0")
    ids = tuple(n.node_id for n in entries)
    nodes = _same_or_new(held, ids, effective_addresses(entries))
    return SnapshotRead(
        nodes,
        [n.load for n in entries],
        [n.healthy for n in entries],
        [n.draining for n in entries],
        [i for i, n in enumerate(entries) if n.age_ms > max_age_ms],
    )


def _same_or_new(held: NodeSet, ids: tuple[str, ...], addresses: tuple[str, ...]) -> NodeSet:
    if ids == held.ids and addresses == held.addresses:
        return held
    return NodeSet(ids, addresses)  # raises ValueError on duplicate ids
