"""Pinned content-hash vectors for the routing table, like the key-hash vectors.

A table's version is ``"p" + content_hash[:16]``, and the hash is what makes imports idempotent and
lets a router verify a table it fetched, so it must never change by accident. Each vector is
pinned as a literal *and* re-derived here from the layout in docs/ARCHITECTURE.md with ``hashlib``
and ``struct`` alone (no numpy, no code from ``dataplane``), so a change to the code, the doc or
the vector shows up as a disagreement between them.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from dataplane.core.table import PlannerParams, RoutingTable, make_table
from dataplane.core.table_codec import decode_table, encode_table


@dataclass(frozen=True)
class Vector:
    name: str
    pool: str
    node_ids: tuple[str, ...]
    key_hashes: tuple[int, ...]
    set_offsets: tuple[int, ...]
    set_members: tuple[int, ...]
    q_cap: float
    slots_per_node: int
    placement: str
    node_weights: tuple[float, ...]
    seed: int
    content_hash: str


VECTORS = [
    Vector(
        name="weighted, random placement, seed >= 2**63",
        pool="eu-west",
        node_ids=("node-a", "node-b", "nœud-ç"),
        key_hashes=(5, 2**63, 2**64 - 1),
        set_offsets=(0, 1, 3, 4),
        set_members=(2, 0, 1, 1),
        q_cap=2.5,
        slots_per_node=8,
        placement="random",
        node_weights=(1.0, 2.0, 0.5),
        seed=2**63 + 12345,
        content_hash="9f7def838358bb2eefa3743174d948abd412fa5e5bb9b51f0d6f49236430e86b",
    ),
    Vector(
        name="largest seed, unweighted lpt",
        pool="default",
        node_ids=("a", "b"),
        key_hashes=(42,),
        set_offsets=(0, 2),
        set_members=(0, 1),
        q_cap=10.0,
        slots_per_node=1,
        placement="lpt",
        node_weights=(),
        seed=2**64 - 1,
        content_hash="3ebdf9fb231f3911913cb5444a6e2f2f0f0f4932f42500985e82e776eef7d363",
    ),
    Vector(
        name="empty table",
        pool="default",
        node_ids=("only",),
        key_hashes=(),
        set_offsets=(0,),
        set_members=(),
        q_cap=1.0,
        slots_per_node=0,
        placement="hash",
        node_weights=(),
        seed=0,
        content_hash="d5e40899a72f3bfcdd2e433df606383560640277d6d0c65abfb1543b602be573",
    ),
]


def length_prefixed(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def rederive(v: Vector) -> str:
    """The content hash from docs/ARCHITECTURE.md's layout, field by field."""
    parts = [
        struct.pack("<I", 1),  # u32 format
        length_prefixed(v.pool),
        struct.pack("<I", len(v.node_ids)),
        *(length_prefixed(node) for node in v.node_ids),
        struct.pack("<Q", len(v.key_hashes)),  # u64 n
        b"".join(struct.pack("<Q", h) for h in v.key_hashes),
        b"".join(struct.pack("<I", o) for o in v.set_offsets),
        b"".join(struct.pack("<H", m) for m in v.set_members),
        struct.pack("<d", v.q_cap),
        struct.pack("<I", v.slots_per_node),  # W
        length_prefixed(v.placement),
        struct.pack("<I", len(v.node_weights)),
        b"".join(struct.pack("<d", w) for w in v.node_weights),
        struct.pack("<Q", v.seed),
    ]
    return hashlib.blake2b(b"".join(parts), digest_size=32, person=b"cacheroute.t1").hexdigest()


def build(v: Vector) -> RoutingTable:
    return make_table(
        pool=v.pool,
        node_ids=v.node_ids,
        key_hashes=np.array(v.key_hashes, dtype=np.uint64),
        set_offsets=np.array(v.set_offsets, dtype=np.uint32),
        set_members=np.array(v.set_members, dtype=np.uint16),
        params=PlannerParams(
            q_cap=v.q_cap,
            slots_per_node=v.slots_per_node,
            placement=v.placement,
            node_weights=v.node_weights,
            seed=v.seed,
        ),
        created_at_unix_ms=1_700_000_000_000,
    )


@pytest.mark.parametrize("v", VECTORS, ids=[v.name for v in VECTORS])
def test_table_content_hash_matches_the_pinned_vector(v: Vector) -> None:
    t = build(v)
    assert t.content_hash == v.content_hash
    assert t.version == "p" + v.content_hash[:16]


@pytest.mark.parametrize("v", VECTORS, ids=[v.name for v in VECTORS])
def test_pinned_vector_is_rederived_from_the_documented_layout(v: Vector) -> None:
    assert rederive(v) == v.content_hash


@pytest.mark.parametrize("v", VECTORS, ids=[v.name for v in VECTORS])
def test_a_decoded_table_verifies_against_the_pinned_hash(v: Vector) -> None:
    decoded = decode_table(encode_table(build(v)))
    assert decoded.content_hash == v.content_hash
    assert decoded.params.seed == v.seed
