"""The immutable routing table: sorted key hashes and their destination sets as numpy arrays.

One table holds no per-key Python object: a million keys cost ~14 bytes each (8 for the hash, 4
for the set offset, 2 per set member). A router builds and validates a table off the serving path
and then swaps a single reference, so a table never changes after construction (its arrays are
read-only).

Layout (CSR): key ``i`` has hash ``key_hashes[i]`` (strictly increasing) and destination set
``set_members[set_offsets[i]:set_offsets[i + 1]]`` (indices into ``node_ids``, strictly increasing,
so distinct and non-empty).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

TABLE_FORMAT = 1
MAX_NODES = 65535
PLACEMENTS = ("lpt", "hash", "random")

U64Array = npt.NDArray[np.uint64]
U32Array = npt.NDArray[np.uint32]
U16Array = npt.NDArray[np.uint16]
F64Array = npt.NDArray[np.float64]


class TableError(ValueError):
    """A table that must not be served; the message says which rule it breaks."""


@dataclass(frozen=True)
class PlannerParams:
    """The knobs that shaped a plan (besides the rates)."""

    q_cap: float
    slots_per_node: int
    placement: str = "lpt"
    node_weights: tuple[float, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class PlanStats:
    """What the planner reports about a plan; not part of its content hash."""

    num_keys: int = 0
    admitted_keys: int = 0
    total_rate: float = 0.0
    admitted_rate_share: float = 0.0
    slots_used: int = 0
    slots_total: int = 0
    max_replicas: int = 0
    planned_load: tuple[float, ...] = ()
    planned_imbalance: float = 1.0
    build_ms: float = 0.0
    tail_rate: float = 0.0


@dataclass(frozen=True)
class KeyLabel:
    """A key's plain text and rate, kept for the top keys so operators can read a plan."""

    key_hash: int
    key: str
    rate: float


@dataclass(frozen=True, eq=False)
class RoutingTable:
    """A validated, read-only routing table. Build with :func:`make_table` or decode one."""

    pool: str
    version: str
    content_hash: str
    created_at_unix_ms: int
    node_ids: tuple[str, ...]
    key_hashes: U64Array
    set_offsets: U32Array
    set_members: U16Array
    params: PlannerParams
    stats: PlanStats = field(default_factory=PlanStats)
    top_keys: tuple[KeyLabel, ...] = ()

    @property
    def num_keys(self) -> int:
        return int(self.key_hashes.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (what a router pays per table)."""
        return int(self.key_hashes.nbytes + self.set_offsets.nbytes + self.set_members.nbytes)

    def find(self, key_hash: int) -> int:
        """Row of ``key_hash`` in the table, or -1 when the key is not warm."""
        hashes = self.key_hashes
        row = int(hashes.searchsorted(np.uint64(key_hash)))
        if row < hashes.shape[0] and int(hashes[row]) == key_hash:
            return row
        return -1

    def members(self, row: int) -> list[int]:
        """Destination indices (into ``node_ids``) of the key at ``row``."""
        offsets = self.set_offsets
        return self.set_members[int(offsets[row]) : int(offsets[row + 1])].tolist()  # type: ignore[no-any-return]

    def destinations(self, key_hash: int) -> list[int] | None:
        """Destination indices of a warm key, or None for a key the table does not hold."""
        row = self.find(key_hash)
        return None if row < 0 else self.members(row)

    def destination_ids(self, key_hash: int) -> list[str] | None:
        members = self.destinations(key_hash)
        return None if members is None else [self.node_ids[m] for m in members]


def _frozen(array: npt.ArrayLike, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """``array`` as ``dtype``, read-only, and copied if the caller could still write to it.

    Arrays that wrap immutable ``bytes`` (a decoded snapshot) are kept as they are; a caller's
    writable array is copied rather than frozen in place, so the caller keeps a usable array
    and holds no writable alias (e.g. the base of a view) into the table.
    """
    out = np.asarray(array, dtype=dtype)
    if isinstance(array, np.ndarray) and np.may_share_memory(out, array):
        root: object = out
        while isinstance(root, np.ndarray | memoryview):
            root = root.base if isinstance(root, np.ndarray) else root.obj
        if not isinstance(root, bytes):
            out = out.copy()
    out.flags.writeable = False
    return out


def validate_arrays(
    node_ids: Sequence[str],
    key_hashes: U64Array,
    set_offsets: U32Array,
    set_members: U16Array,
) -> None:
    """Raise :class:`TableError` unless the arrays form a servable table (module docstring)."""
    num_nodes = len(node_ids)
    if num_nodes == 0:
        raise TableError("table has no destinations")
    if num_nodes > MAX_NODES:
        raise TableError(f"table has {num_nodes} destinations; the limit is {MAX_NODES}")
    if any(not node for node in node_ids):
        raise TableError("a destination id is empty")
    if len(set(node_ids)) != num_nodes:
        raise TableError("destination ids are not unique")
    n = key_hashes.shape[0]
    if set_offsets.shape[0] != n + 1:
        raise TableError(f"set_offsets has {set_offsets.shape[0]} entries; expected {n + 1}")
    if int(set_offsets[0]) != 0:
        raise TableError("set_offsets[0] is not 0")
    if int(set_offsets[-1]) != set_members.shape[0]:
        raise TableError(
            f"set_offsets ends at {int(set_offsets[-1])} but there are "
            f"{set_members.shape[0]} set members"
        )
    if n == 0:
        return
    if not bool(np.all(key_hashes[1:] > key_hashes[:-1])):
        raise TableError("key hashes are not sorted and unique")
    if not bool(np.all(set_offsets[1:] > set_offsets[:-1])):
        raise TableError("a destination set is empty (set_offsets not strictly increasing)")
    if int(set_members.max()) >= num_nodes:
        raise TableError(f"a set member is {int(set_members.max())}; there are {num_nodes} nodes")
    rising = set_members[1:] > set_members[:-1]
    set_start = np.zeros(set_members.shape[0] - 1, dtype=np.bool_)
    set_start[set_offsets[1:-1].astype(np.int64) - 1] = True
    if not bool(np.all(rising | set_start)):
        raise TableError("a destination set repeats a member or is not sorted")


def _pack_str(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def content_hash(
    pool: str,
    node_ids: Sequence[str],
    key_hashes: U64Array,
    set_offsets: U32Array,
    set_members: U16Array,
    params: PlannerParams,
) -> str:
    """Hex BLAKE2b-256 of a table's canonical content (docs/ARCHITECTURE.md has the layout)."""
    digest = hashlib.blake2b(digest_size=32, person=b"cacheroute.t1")
    digest.update(struct.pack("<I", TABLE_FORMAT))
    digest.update(_pack_str(pool))
    digest.update(struct.pack("<I", len(node_ids)))
    for node in node_ids:
        digest.update(_pack_str(node))
    digest.update(struct.pack("<Q", key_hashes.shape[0]))
    for array, dtype in ((key_hashes, "<u8"), (set_offsets, "<u4"), (set_members, "<u2")):
        digest.update(np.ascontiguousarray(array, dtype=dtype).data)
    digest.update(struct.pack("<dI", params.q_cap, params.slots_per_node))
    digest.update(_pack_str(params.placement))
    digest.update(struct.pack("<I", len(params.node_weights)))
    digest.update(np.asarray(params.node_weights, dtype="<f8").tobytes())
    digest.update(struct.pack("<Q", params.seed))
    return digest.hexdigest()


def version_of(content: str) -> str:
    """Plan version id for a content hash: immutable and equal for equal content."""
    return "p" + content[:16]


def make_table(
    *,
    pool: str,
    node_ids: Sequence[str],
    key_hashes: U64Array,
    set_offsets: U32Array,
    set_members: U16Array,
    params: PlannerParams,
    created_at_unix_ms: int,
    stats: PlanStats | None = None,
    top_keys: Sequence[KeyLabel] = (),
    expected_content_hash: str | None = None,
    trusted_content_hash: str | None = None,
) -> RoutingTable:
    """Validate the arrays, freeze them and compute the content hash and version.

    ``expected_content_hash`` rejects a table whose content does not hash to it;
    ``trusted_content_hash`` skips hashing altogether (the layout is still validated).
    """
    hashes = _frozen(key_hashes, np.uint64)
    offsets = _frozen(set_offsets, np.uint32)
    members = _frozen(set_members, np.uint16)
    validate_arrays(node_ids, hashes, offsets, members)
    if params.placement not in PLACEMENTS:
        raise TableError(f"unknown placement {params.placement!r}; expected one of {PLACEMENTS}")
    if not 0 <= params.seed < 2**64:  # hashed as u64: say so rather than fail in struct.pack
        raise TableError(f"seed must be an integer in [0, 2**64), got {params.seed}")
    if params.node_weights and len(params.node_weights) != len(node_ids):
        raise TableError(
            f"{len(params.node_weights)} node weights for {len(node_ids)} destinations"
        )
    digest = trusted_content_hash or content_hash(pool, node_ids, hashes, offsets, members, params)
    if expected_content_hash is not None and expected_content_hash != digest:
        raise TableError(
            f"content hash mismatch: table says {expected_content_hash[:16]}…, "
            f"content is {digest[:16]}…"
        )
    return RoutingTable(
        pool=pool,
        version=version_of(digest),
        content_hash=digest,
        created_at_unix_ms=created_at_unix_ms,
        node_ids=tuple(node_ids),
        key_hashes=hashes,
        set_offsets=offsets,
        set_members=members,
        params=params,
        stats=stats or PlanStats(),
        top_keys=tuple(top_keys),
    )
