"""A table as a delta against the version a router holds: bytes in proportion to what changed.

A rollout used to ship the whole table to every router (14 MB per 1M keys, per router) even when
the churn-aware replanner moved 6% of the keys. Keys are spread over the sorted hash array, so
fixed or content-defined chunks of the serialized table would nearly all change; a row-level
delta does not. :func:`diff_tables` lists the target's rows that the base does not hold as they
are (new keys, or a destination set that changed, compared by node id) and the base keys the
target dropped; :func:`apply_delta` merges them into the base in a few numpy passes and rebuilds
the target with its content hash verified, so a router either holds exactly the target or
rejects the delta (and fetches the whole table). Node ids may be added, removed or reordered:
unchanged rows are renumbered into the target's ``node_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dataplane.core.table import RoutingTable, TableError, make_table

I64Array = npt.NDArray[np.int64]
DELTA_FORMAT = 1


@dataclass(frozen=True)
class TableDelta:
    """The target table's header and changed rows (CSR over those rows) against ``base_version``.

    ``target`` is a :class:`RoutingTable` only as a carrier: its arrays hold just the changed
    rows, and its version and content hash are the whole target's (checked on apply).
    """

    base_version: str
    target: RoutingTable  # header of the target; arrays: the changed rows only
    removed: npt.NDArray[np.uint64]  # sorted base hashes the target does not hold


def segment_positions(starts: I64Array, lengths: I64Array) -> I64Array:
    """Concatenated ``range(start, start + length)`` for each pair, without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(lengths) - lengths
    positions: I64Array = np.arange(total, dtype=np.int64) + np.repeat(starts - before, lengths)
    return positions


def _renumbering(base: RoutingTable, target_ids: tuple[str, ...]) -> I64Array:
    """Base member index → the target's index of the same node id (-1: not in the target)."""
    index = {node: i for i, node in enumerate(target_ids)}
    return np.array([index.get(node, -1) for node in base.node_ids], dtype=np.int64)


def _lengths(table: RoutingTable, rows: I64Array) -> I64Array:
    offsets = table.set_offsets.astype(np.int64)
    return offsets[rows + 1] - offsets[rows]


def diff_tables(base: RoutingTable, target: RoutingTable) -> TableDelta:
    """The delta that turns ``base`` into ``target`` (module docstring)."""
    if base.pool != target.pool:
        raise TableError(f"tables of pools {base.pool!r} and {target.pool!r} do not diff")
    _, rows0, rows1 = np.intersect1d(
        base.key_hashes, target.key_hashes, assume_unique=True, return_indices=True
    )
    rows0, rows1 = rows0.astype(np.int64), rows1.astype(np.int64)
    len0, len1 = _lengths(base, rows0), _lengths(target, rows1)
    same = len0 == len1
    cand0, cand1, lengths = rows0[same], rows1[same], len1[same]
    where0 = segment_positions(base.set_offsets.astype(np.int64)[cand0], lengths)
    where1 = segment_positions(target.set_offsets.astype(np.int64)[cand1], lengths)
    renumber = _renumbering(base, target.node_ids)
    differs = renumber[base.set_members[where0]] != target.set_members[where1]
    owner = np.repeat(np.arange(cand1.shape[0]), lengths)
    moved = np.bincount(owner[differs], minlength=cand1.shape[0]) > 0
    keep = np.ones(target.num_keys, dtype=np.bool_)
    keep[cand1[~moved]] = False  # rows the base holds as they are
    changed_rows = np.flatnonzero(keep).astype(np.int64)
    sizes = _lengths(target, changed_rows)
    offsets = np.zeros(changed_rows.shape[0] + 1, dtype=np.uint32)
    np.cumsum(sizes, out=offsets[1:])
    members = target.set_members[
        segment_positions(target.set_offsets.astype(np.int64)[changed_rows], sizes)
    ]
    carrier = RoutingTable(
        pool=target.pool, version=target.version, content_hash=target.content_hash,
        created_at_unix_ms=target.created_at_unix_ms, node_ids=target.node_ids,
        key_hashes=target.key_hashes[changed_rows], set_offsets=offsets, set_members=members,
        params=target.params, stats=target.stats, top_keys=target.top_keys,
    )  # fmt: skip
    removed = np.setdiff1d(base.key_hashes, target.key_hashes, assume_unique=True)
    return TableDelta(base.version, carrier, removed.astype(np.uint64))


def _rows_of(hashes: npt.NDArray[np.uint64], wanted: npt.NDArray[np.uint64]) -> I64Array:
    """Rows of ``wanted`` in sorted ``hashes`` (-1 where absent)."""
    rows = np.searchsorted(hashes, wanted).astype(np.int64)
    found = rows < hashes.shape[0]
    found[found] = hashes[rows[found]] == wanted[found]
    return np.where(found, rows, -1)


def apply_delta(base: RoutingTable, delta: TableDelta) -> RoutingTable:
    """The target table, content hash verified; :class:`TableError` when ``delta`` does not turn
    ``base`` into a valid table with the hash it names."""
    head = delta.target
    if delta.base_version != base.version:
        raise TableError(f"delta is against {delta.base_version}, this router holds {base.version}")
    if head.pool != base.pool:
        raise TableError(f"delta is for pool {head.pool!r}, not {base.pool!r}")
    changed = head.key_hashes
    if changed.shape[0] and not bool(np.all(changed[1:] > changed[:-1])):
        raise TableError("delta rows are not sorted and unique")
    gone = _rows_of(base.key_hashes, delta.removed)
    if (gone < 0).any():
        raise TableError("delta removes a key the base does not hold")
    drop = np.zeros(base.num_keys, dtype=np.bool_)
    drop[gone] = True
    replaced = _rows_of(base.key_hashes, changed)
    drop[replaced[replaced >= 0]] = True
    kept = np.flatnonzero(~drop).astype(np.int64)
    kept_hashes = base.key_hashes[kept]
    # Merge two sorted runs: each row's place is its own index plus the other run's keys below it.
    at_kept = np.arange(kept.shape[0]) + np.searchsorted(changed, kept_hashes)
    at_changed = np.arange(changed.shape[0]) + np.searchsorted(kept_hashes, changed)
    total = kept.shape[0] + changed.shape[0]
    hashes = np.empty(total, dtype=np.uint64)
    hashes[at_kept], hashes[at_changed] = kept_hashes, changed
    kept_len = _lengths(base, kept)
    changed_offsets = head.set_offsets.astype(np.int64)
    if changed_offsets.shape[0] != changed.shape[0] + 1 or int(changed_offsets[-1]) != int(
        head.set_members.shape[0]
    ):
        raise TableError("delta set_offsets do not fit its rows")
    changed_len = np.diff(changed_offsets)
    sizes = np.empty(total, dtype=np.int64)
    sizes[at_kept], sizes[at_changed] = kept_len, changed_len
    offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    members = np.empty(int(offsets[-1]), dtype=np.int64)
    renumber = _renumbering(base, head.node_ids)
    base_starts = base.set_offsets.astype(np.int64)[kept]
    old = renumber[base.set_members[segment_positions(base_starts, kept_len)]]
    if (old < 0).any():
        raise TableError("delta keeps a row whose destination the target does not hold")
    members[segment_positions(offsets[at_kept], kept_len)] = old
    members[segment_positions(offsets[at_changed], changed_len)] = head.set_members
    if members.shape[0] and int(members.max()) >= 65536:
        raise TableError("delta names a destination beyond the table's")
    table = make_table(
        pool=head.pool, node_ids=head.node_ids, key_hashes=hashes,
        set_offsets=offsets.astype(np.uint32), set_members=members.astype(np.uint16),
        params=head.params, created_at_unix_ms=head.created_at_unix_ms, stats=head.stats,
        top_keys=head.top_keys, expected_content_hash=head.content_hash,
    )  # fmt: skip
    if table.version != head.version:
        raise TableError(f"delta names version {head.version}, its content is {table.version}")
    return table
