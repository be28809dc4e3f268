"""Compare two plans' key → destination-set maps (pure; numpy, no per-key Python loop).

Sets are compared by node *id*, not index, since two tables number their destinations
differently. A key warm in both plans is *unchanged* when its sets hold the same node ids, else
*moved*; a key warm in one plan only is *added* or *removed*. ``churn`` is 1 − Jaccard similarity
of the two maps seen as sets of (key, set) pairs: 1 − unchanged / (keys in either plan).

The comparison itself (set signatures, churn) lives in :mod:`controlplane.core.churn`, which the
replanner shares.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cacheroute.v1 import admin_pb2
from controlplane.core.churn import compare, set_signatures
from dataplane.core.table import RoutingTable

__all__ = ["diff_plans", "set_signatures"]


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
    result = compare(old, new)
    common, old_rows, new_rows = result.common, result.old_rows, result.new_rows
    moved_mask = result.moved_mask
    moved, unchanged = result.moved, result.unchanged
    diff = admin_pb2.PlanDiff(
        from_version=old.version,
        to_version=new.version,
        keys_from=old.num_keys,
        keys_to=new.num_keys,
        keys_added=new.num_keys - int(common.shape[0]),
        keys_removed=old.num_keys - int(common.shape[0]),
        keys_moved=moved,
        keys_unchanged=unchanged,
        churn=result.churn,
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
