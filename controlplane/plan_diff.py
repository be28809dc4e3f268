"""Compare two plans' key → destination-set maps (pure; numpy, no per-key Python loop).

Sets are compared by node *id*, not index, since two tables number their destinations
differently. A key warm in both plans is *unchanged* when its sets hold the same node ids, else
*moved*; a key warm in one plan only is *added* or *removed*. ``churn`` is 1 − Jaccard similarity
of the two maps seen as sets of (key, set) pairs: 1 − unchanged / (keys in either plan).

Per-key sets are compared through an order-free signature: the wrapping uint64 sum of a random
64-bit tag per node id plus the set size; two different sets collide with probability ~2^-64.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from cacheroute.v1 import admin_pb2
from dataplane.core.table import RoutingTable


def _tag(node_id: str) -> int:
    digest = hashlib.blake2b(node_id.encode(), digest_size=8, person=b"cacheroute.dif")
    return int.from_bytes(digest.digest(), "little")


def set_signatures(table: RoutingTable) -> npt.NDArray[np.uint64]:
    """One uint64 per key that equals another table's iff the two sets hold the same node ids."""
    if table.num_keys == 0:
        return np.zeros(0, dtype=np.uint64)
    tags = np.array([_tag(n) for n in table.node_ids], dtype=np.uint64)
    member_tags = tags[table.set_members.astype(np.int64)]
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(member_tags, table.set_offsets[:-1].astype(np.int64))
        sizes = np.diff(table.set_offsets).astype(np.uint64)
        signature: npt.NDArray[np.uint64] = sums * np.uint64(0x9E3779B97F4A7C15) + sizes
    return signature


def _labels(*tables: RoutingTable) -> dict[int, str]:
    return {k.key_hash: k.key for t in tables for k in t.top_keys if k.key}


def _pick(
    moved: npt.NDArray[np.intp], common: npt.NDArray[np.uint64], limit: int, *tables: RoutingTable
) -> list[int]:
    """Up to ``limit`` moved rows: keys with a known rate (the plans' top keys, highest rate
    first), then the others in key-hash order."""
    rates: dict[int, float] = {}
    for table in tables:
        for label in table.top_keys:
            rates[label.key_hash] = max(rates.get(label.key_hash, 0.0), label.rate)
    known = np.flatnonzero(np.isin(common[moved], np.array(list(rates), dtype=np.uint64)))
    ranked = sorted(moved[known].tolist(), key=lambda i: -rates[int(common[i])])
    rest: list[int] = np.delete(moved, known)[: max(0, limit - len(ranked))].tolist()
    return (ranked + rest)[:limit]


def diff_plans(old: RoutingTable, new: RoutingTable, limit: int) -> admin_pb2.PlanDiff:
    """Counts of added/removed/moved/unchanged keys, churn, and up to ``limit`` moves (the
    highest-rate keys first)."""
    common, old_rows, new_rows = np.intersect1d(
        old.key_hashes, new.key_hashes, assume_unique=True, return_indices=True
    )
    moved_mask = set_signatures(old)[old_rows] != set_signatures(new)[new_rows]
    moved = int(moved_mask.sum())
    unchanged = int(common.shape[0]) - moved
    either = old.num_keys + new.num_keys - int(common.shape[0])
    diff = admin_pb2.PlanDiff(
        from_version=old.version,
        to_version=new.version,
        keys_from=old.num_keys,
        keys_to=new.num_keys,
        keys_added=new.num_keys - int(common.shape[0]),
        keys_removed=old.num_keys - int(common.shape[0]),
        keys_moved=moved,
        keys_unchanged=unchanged,
        churn=1.0 - unchanged / either if either else 0.0,
    )
    labels = _labels(old, new)
    for i in _pick(np.flatnonzero(moved_mask), common, limit, old, new):
        key_hash = int(common[i])
        diff.moves.append(
            admin_pb2.KeyMove(
                key_hash=key_hash,
                key=labels.get(key_hash, ""),
                from_node_ids=[old.node_ids[m] for m in old.members(int(old_rows[i]))],
                to_node_ids=[new.node_ids[m] for m in new.members(int(new_rows[i]))],
            )
        )
    return diff
