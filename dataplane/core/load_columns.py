"""A load snapshot's node fields as columns, so a router applies 1,000 nodes in one numpy pass.

Reading ``LoadSnapshot.nodes`` costs a Python object per node and per field (~2-3 ms for 1,000
nodes, four times a second, on the serving loop). The publisher therefore also writes the fields a
router applies as little-endian arrays (``NodeColumns``): loads, a flag byte (healthy, draining)
and report ages, plus a digest of the membership (ids and addresses in order). A router holding
the same digest reads no node message at all; on a membership change it reads the ids, and
rejects the snapshot when they do not hash to the digest (columns that lie about their nodes).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cacheroute.v1 import cluster_pb2

HEALTHY = 1
DRAINING = 2

F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
I64Array = npt.NDArray[np.int64]


def membership_digest(ids: Sequence[str], addresses: Sequence[str]) -> bytes:
    """BLAKE2b-128 of ids and addresses, in order, each length-prefixed (no two lists collide)."""
    digest = hashlib.blake2b(digest_size=16, person=b"cacheroute.m1")
    digest.update(struct.pack("<I", len(ids)))
    for node, address in zip(ids, addresses, strict=True):
        for text in (node, address):
            data = text.encode("utf-8")
            digest.update(struct.pack("<I", len(data)))
            digest.update(data)
    return digest.digest()


def effective_addresses(nodes: Iterable[cluster_pb2.NodeLoad]) -> tuple[str, ...]:
    """The address a router dials per node: its own, else its id (as ``NodeSet`` does)."""
    return tuple(n.address or n.node_id for n in nodes)


def encode_columns(nodes: Sequence[cluster_pb2.NodeLoad]) -> cluster_pb2.NodeColumns:
    """The columns of ``nodes`` (what the publisher adds to every snapshot)."""
    ids = [n.node_id for n in nodes]
    flags = bytes(HEALTHY * n.healthy | DRAINING * n.draining for n in nodes)
    return cluster_pb2.NodeColumns(
        membership=membership_digest(ids, effective_addresses(nodes)),
        load=np.array([n.load for n in nodes], dtype="<f8").tobytes(),
        flags=flags,
        age_ms=np.array([n.age_ms for n in nodes], dtype="<i8").tobytes(),
    )


@dataclass(frozen=True)
class Columns:
    """Decoded columns, one entry per node, in the snapshot's node order."""

    membership: bytes
    loads: F64Array
    healthy: BoolArray
    draining: BoolArray
    age_ms: I64Array


def _array(data: bytes, dtype: str, count: int, name: str) -> npt.NDArray[Any]:
    width = np.dtype(dtype).itemsize
    if len(data) != width * count:
        raise ValueError(f"columns.{name} is {len(data)} bytes; {count} nodes need {width * count}")
    return np.frombuffer(data, dtype=dtype).astype(dtype[1:], copy=False)


def read_columns(snapshot: cluster_pb2.LoadSnapshot) -> Columns | None:
    """The snapshot's columns, None when it has none; ValueError when they do not fit its nodes.

    A NaN, infinite or negative load raises too (naming the node), as the per-node path does.
    """
    if not snapshot.HasField("columns"):
        return None
    cols = snapshot.columns
    count = len(snapshot.nodes)
    if len(cols.membership) != 16:
        raise ValueError(f"columns.membership is {len(cols.membership)} bytes, not 16")
    loads = _array(cols.load, "<f8", count, "load")
    flags = _array(cols.flags, "|u1", count, "flags")
    ages = _array(cols.age_ms, "<i8", count, "age_ms")
    good = np.isfinite(loads) & (loads >= 0)
    if not good.all():
        bad = int(np.flatnonzero(~good)[0])
        node = snapshot.nodes[bad]
        raise ValueError(f"node {node.node_id!r} has load {loads[bad]}; loads are finite, >= 0")
    return Columns(
        membership=cols.membership,
        loads=loads.astype(np.float64, copy=False),
        healthy=(flags & HEALTHY).astype(np.bool_),
        draining=(flags & DRAINING).astype(np.bool_),
        age_ms=ages.astype(np.int64, copy=False),
    )
