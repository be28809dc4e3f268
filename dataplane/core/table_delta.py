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
    keep = ~drop
    kept_hashes = base.key_hashes[keep]
    changed_offsets = head.set_offsets.astype(np.int64)
    if changed_offsets.shape[0] != changed.shape[0] + 1 or int(changed_offsets[-1]) != int(
        head.set_members.shape[0]
    ):
        raise TableError("delta set_offsets do not fit its rows")
    # Merge two sorted runs with masks, not per-element scatters (they hold the GIL, and this runs
    # beside the serving thread): a changed row's place is its index plus the kept keys below it.
    total = kept_hashes.shape[0] + changed.shape[0]
    is_changed = np.zeros(total, dtype=np.bool_)
    is_changed[np.arange(changed.shape[0]) + np.searchsorted(kept_hashes, changed)] = True
    hashes = np.empty(total, dtype=np.uint64)
    hashes[~is_changed], hashes[is_changed] = kept_hashes, changed
    base_offsets = base.set_offsets.astype(np.int64)
    base_len = base_offsets[1:] - base_offsets[:-1]
    sizes: I64Array = np.empty(total, dtype=np.int64)
    sizes[~is_changed], sizes[is_changed] = base_len[keep], np.diff(changed_offsets)
    offsets = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    old = base.set_members[np.repeat(keep, base_len)]
    if base.node_ids != head.node_ids:  # renumber the kept rows into the target's node ids
        renumber = _renumbering(base, head.node_ids)
        if (renumber[np.unique(old)] < 0).any():
            raise TableError("delta keeps a row whose destination the target does not hold")
        old = renumber.astype(np.uint16)[old]
    members = np.empty(int(offsets[-1]), dtype=np.uint16)
    new_member = np.repeat(is_changed, sizes)
    members[~new_member], members[new_member] = old, head.set_members
    table = make_table(
        pool=head.pool, node_ids=head.node_ids, key_hashes=hashes,
        set_offsets=offsets.astype(np.uint32), set_members=members,
        params=head.params, created_at_unix_ms=head.created_at_unix_ms, stats=head.stats,
        top_keys=head.top_keys, expected_content_hash=head.content_hash,
    )  # fmt: skip
    if table.version != head.version:
        raise TableError(f"delta names version {head.version}, its content is {table.version}")
    return table
