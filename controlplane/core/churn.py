"""Churn between two plans' key → destination-set maps (pure; numpy, no per-key Python loop).

Sets are compared by node *id*, not index, since two tables number their destinations
differently, through an order-free signature: the wrapping uint64 sum of a random 64-bit tag per
node id times a constant, plus the set size; two different sets collide with probability ~2^-64.

``churn`` = 1 − unchanged / (keys in either plan): a key is *unchanged* when it is warm in both
plans with the same node ids; a key that moved, joined or left the warm set counts as churned.
This is the number ``plan diff`` reports and the one the replanner minimises.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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


@dataclass(frozen=True)
class Churn:
    """How two plans' maps differ; ``moved_mask`` is aligned with ``common``."""

    common: npt.NDArray[np.uint64]
    old_rows: npt.NDArray[np.intp]
    new_rows: npt.NDArray[np.intp]
    moved_mask: npt.NDArray[np.bool_]
    keys_old: int
    keys_new: int

    @property
    def moved(self) -> int:
        return int(self.moved_mask.sum())

    @property
    def unchanged(self) -> int:
        return int(self.common.shape[0]) - self.moved

    @property
    def churn(self) -> float:
        either = self.keys_old + self.keys_new - int(self.common.shape[0])
        return 1.0 - self.unchanged / either if either else 0.0

    @property
    def moved_share(self) -> float:
        """Moved keys over the keys warm in both plans (0 when none are)."""
        return self.moved / self.common.shape[0] if self.common.shape[0] else 0.0


def compare(old: RoutingTable, new: RoutingTable) -> Churn:
    common, old_rows, new_rows = np.intersect1d(
        old.key_hashes, new.key_hashes, assume_unique=True, return_indices=True
    )
    moved_mask = set_signatures(old)[old_rows] != set_signatures(new)[new_rows]
    return Churn(common, old_rows, new_rows, moved_mask, old.num_keys, new.num_keys)


def churn(old: RoutingTable | None, new: RoutingTable) -> float:
    """1 − unchanged / keys in either plan; a first plan (no ``old``) churns every key it has."""
    if old is None:
        return 1.0 if new.num_keys else 0.0
    return compare(old, new).churn
