"""Which nodes a policy may pick, from health, drain state and ejections, in one numpy pass.

The rules are :class:`~dataplane.core.load_view.LoadView`'s (its docstring): undrained and
healthy nodes are eligible; below ``panic_threshold`` of the undrained nodes healthy, every
undrained node is (panic); ejected nodes are then removed unless that leaves none. Kept apart
from the view so a 1,000-node snapshot costs a few numpy calls rather than a Python loop per node.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]


class Eligibility(NamedTuple):
    healthy: list[bool]  # what policies read as healthy (every node in panic, minus ejections)
    eligible: tuple[int, ...]  # healthy and undrained, in index order
    panic: bool


def eligibility(
    reported: BoolArray, draining: BoolArray, ejected: frozenset[int], panic_threshold: float
) -> Eligibility:
    """The eligible set the rules above give (``ejected`` holds valid node indices)."""
    undrained = ~draining
    eligible = undrained & reported
    count = int(undrained.sum())
    panic = count > 0 and int(eligible.sum()) < panic_threshold * count
    if panic:
        eligible = undrained
        healthy = np.ones(reported.shape[0], dtype=np.bool_)
    else:
        healthy = reported.copy()
    if ejected:
        mask = np.zeros(reported.shape[0], dtype=np.bool_)
        mask[list(ejected)] = True
        kept = eligible & ~mask
        if kept.any():  # ejection never empties the pool
            eligible = kept
            healthy[mask] = False
    return Eligibility(healthy.tolist(), tuple(np.flatnonzero(eligible).tolist()), panic)
