"""The per-key reusable-prefix sizes a live build's byte-aware admission uses.

Byte-aware admission (:mod:`controlplane.core.byte_admission`) is on for live builds when
``--cache-budget`` (prefix blocks per destination) is > 0. Each key's size s_b, in prefix blocks
(the unit of ``RouteRequest.prefix_blocks``; the routers' own 64-byte prompt blocks when they hash
``prompt_prefix``), is, in this order:

1. **configured**: ``--prefix-sizes FILE`` (JSON ``{"key": blocks, ...}``) names it: an operator's
   figure wins over a measurement;
2. **reported**: the routers' estimate (``KeyCount.reusable_prefix_blocks``, folded by
   :mod:`controlplane.core.size_estimate`), at least one block (a key whose requests share nothing
   still pins the block it writes);
3. **filled**: the median of the sizes known by 1 or 2 (a key never sampled is usually a cold one).

With no size known at all, the build uses equal slots (None).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dataplane.core.table import F64Array, U64Array

MIN_BLOCKS = 1.0


class PlanSizes(NamedTuple):
    sizes: F64Array
    configured: int
    reported: int
    filled: int


def load_sizes_file(text: str) -> tuple[tuple[str, float], ...]:
    """``--prefix-sizes``: a JSON object of key → blocks (> 0); empty text: none."""
    if not text:
        return ()
    try:
        data = json.loads(Path(text).read_text())
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read prefix sizes from {text}: {exc}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f"{text}: want a JSON object of key -> prefix blocks")
    out: list[tuple[str, float]] = []
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise argparse.ArgumentTypeError(f"{text}: size of {key[:40]!r} is not a number")
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text}: size of {key[:40]!r} must be > 0")
        out.append((key, float(value)))
    return tuple(out)


def plan_sizes(
    key_hashes: U64Array,
    labels: Mapping[int, str],
    reported: Mapping[int, float],
    configured: Mapping[str, float],
) -> PlanSizes | None:
    """Each key's size by the module's rule, aligned with ``key_hashes`` (None: none known)."""
    n = key_hashes.shape[0]
    sizes = np.full(n, np.nan, dtype=np.float64)
    from_config = from_reports = 0
    for i, key_hash in enumerate(key_hashes.tolist()):
        label = labels.get(key_hash)
        if label is not None and label in configured:
            sizes[i] = configured[label]
            from_config += 1
        elif (size := reported.get(key_hash)) is not None:
            sizes[i] = max(MIN_BLOCKS, size)
            from_reports += 1
    known = ~np.isnan(sizes)
    if not known.any():
        return None
    filled = n - int(known.sum())
    if filled:
        sizes[~known] = float(np.median(sizes[known]))
    return PlanSizes(sizes, from_config, from_reports, filled)
