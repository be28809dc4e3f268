"""Per-key reusable-prefix sizes from the routers' traffic reports (decayed weighted means).

Each report's ``KeyCount`` may carry ``reusable_prefix_blocks`` (the mean over
``prefix_samples`` comparisons in that router's window, :mod:`dataplane.core.prefix_sizes`).
The rate estimator (:mod:`controlplane.core.rates`) folds them with the same decay weight as the
counts, weighted by samples, so a key's size is

    s_b = Σ_i m_{b,i} · n_{b,i} · D_i  /  Σ_i n_{b,i} · D_i

across routers and windows (older windows fade with the rates' half-life). Keys with no
samples have no size: byte-aware admission fills them in (:func:`controlplane.core.live_sizes`).
The state is a section of the estimator's saved bytes; states saved before it read as empty.
"""

from __future__ import annotations

import numpy as np


class SizeEstimate:
    """``key → [Σ mean · samples · weight, Σ samples · weight]``."""

    __slots__ = ("_sums",)

    def __init__(self) -> None:
        self._sums: dict[int, list[float]] = {}

    def __len__(self) -> int:
        return len(self._sums)

    def observe(self, key_hash: int, mean_blocks: float, samples: int, weight: float) -> None:
        if samples <= 0 or not (mean_blocks >= 0 and mean_blocks < float("inf")):
            return
        entry = self._sums.get(key_hash)
        if entry is None:
            entry = self._sums[key_hash] = [0.0, 0.0]
        entry[0] += mean_blocks * samples * weight
        entry[1] += samples * weight

    def scale(self, factor: float) -> None:
        """The estimator's epoch moved: keep the sums in range (the means do not change)."""
        for entry in self._sums.values():
            entry[0] *= factor
            entry[1] *= factor

    def keep(self, keys: dict[int, float]) -> None:
        """Forget the sizes of keys the estimator forgot."""
        self._sums = {k: v for k, v in self._sums.items() if k in keys}

    def means(self) -> dict[int, float]:
        """Each sized key's reusable prefix, in prefix blocks."""
        return {k: s / n for k, (s, n) in self._sums.items() if n > 0}

    def to_bytes(self) -> bytes:
        n = len(self._sums)
        hashes = np.fromiter(self._sums.keys(), dtype="<u8", count=n)
        pairs = np.array(list(self._sums.values()), dtype="<f8").reshape(n, 2)
        return hashes.tobytes() + pairs.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, offset: int, count: int) -> SizeEstimate:
        """``count`` entries saved by :meth:`to_bytes` at ``offset`` (ValueError when short)."""
        hashes = np.frombuffer(data, dtype="<u8", count=count, offset=offset).tolist()
        pairs = np.frombuffer(data, dtype="<f8", count=2 * count, offset=offset + 8 * count)
        est = cls()
        est._sums = {
            h: [float(pairs[2 * i]), float(pairs[2 * i + 1])] for i, h in enumerate(hashes)
        }
        return est
