"""Per-key request rates from the routers' traffic reports: exponentially decayed counts.

Each router reports, per window ``[start, end)``, its heavy hitters (Space-Saving ``count`` with
overestimation bound ``error``) and its total. The estimator folds every report of every router
into decayed sums, each window's counts spread evenly over the window (H = half-life)::

    N_b(t) = Σ_i  (count_{b,i} − error_{b,i}) · D_i(t)      per key b (Space-Saving lower bound)
    N(t)   = Σ_i  total_i · D_i(t)                          all requests
    D_i(t) = mean over u in [start_i, end_i] of 2^(−(t − u)/H)
           = 2^(−(t − end_i)/H) · (1 − 2^(−w_i/H)) / (w_i · ln 2 / H),   w_i = end_i − start_i

and estimates the rate at ``t_ref`` = the latest window end seen (so rates describe the newest
data rather than decaying between reports) as::

    λ_b = (ln 2 / H) · N_b(t_ref) / (1 − 2^(−(t_ref − t_first)/H))

For a steady rate λ and each router's windows tiling time from t_first, E[N(t)] =
λ·H/ln 2 · (1 − 2^(−(t − t_first)/H)) exactly, whatever the window lengths, so λ_b is unbiased
from the first window on (the denominator corrects the warm-up); the estimate's memory is
~H/ln 2 (≈ 1.44 H) of history. Summing counts across routers needs no window alignment. The
*cold tail* is ``λ_total − Σ λ_b``: traffic seen only as part of the routers' totals (keys that
were never a heavy hitter anywhere). Keys whose rate falls below ``MIN_RATE`` are dropped, and
at most ``max_keys`` (the highest) are kept, their mass staying in the total (hence the tail).

Sums are held relative to an epoch ``t0`` (``c_b = N_b(t0)``) so a new report costs O(keys in
it); the epoch moves forward when the scale factor grows large. The state, including the cursor
of the Redis traffic stream it has consumed, is serialized with :meth:`to_bytes` and kept in Redis
so a restarted or newly elected leader continues without double counting.

Alongside the counts it folds each key's reported reusable-prefix size
(:mod:`controlplane.core.size_estimate`); :attr:`RateSnapshot.prefix_blocks` carries the sized keys.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field

import numpy as np

from cacheroute.v1 import cluster_pb2
from controlplane.core.size_estimate import SizeEstimate
from dataplane.core.table import F64Array, U64Array

MIN_RATE = 1e-3  # requests/s below which a key is forgotten
_MAGIC = b"CRR1"
_RENORMALIZE_HALF_LIVES = 64.0
_LEN = struct.Struct("<I")


class RateStateError(ValueError):
    """A saved estimator state that cannot be read."""


@dataclass(frozen=True)
class RateSnapshot:
    """Estimated rates at ``at_unix_ms`` (requests/s), keys aligned with ``key_hashes``."""

    key_hashes: U64Array
    rates: F64Array
    labels: dict[int, str]
    total_rate: float
    at_unix_ms: int
    prefix_blocks: dict[int, float] = field(default_factory=dict)  # reported sizes, blocks

    @property
    def tail_rate(self) -> float:
        """Traffic not attributed to any tracked key (the cold tail)."""
        return max(0.0, self.total_rate - float(self.rates.sum()))


class RateEstimator:
    def __init__(self, half_life_s: float, *, max_keys: int = 250_000) -> None:
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"half-life must be a positive number of seconds, got {half_life_s}")
        self.half_life_s = half_life_s
        self.max_keys = max_keys
        self.cursor = "0"  # last Redis stream id folded in
        self.reports = 0
        self._t0_ms = 0
        self._first_ms = 0
        self._ref_ms = 0
        self._counts: dict[int, float] = {}
        self._total = 0.0
        self._labels: dict[int, str] = {}
        self._sizes = SizeEstimate()

    @property
    def num_keys(self) -> int:
        return len(self._counts)

    def _weight(self, at_ms: int) -> float:
        return float(2.0 ** ((at_ms - self._t0_ms) / 1000.0 / self.half_life_s))

    def observe(self, report: cluster_pb2.TrafficReport) -> bool:
        """Fold one report in; False (ignored) when its window is not a valid interval."""
        start, end = report.window_start_unix_ms, report.window_end_unix_ms
        if end <= 0 or start > end:
            return False
        start = start or end
        if self.reports == 0:
            self._t0_ms = self._first_ms = start
            self._ref_ms = end
        self._first_ms = min(self._first_ms, start)
        self._ref_ms = max(self._ref_ms, end)
        weight = self._weight(end) * self._spread(end - start)
        self._total += report.total_requests * weight
        counts, labels, sizes = self._counts, self._labels, self._sizes
        for kc in report.top_keys:
            lower = kc.count - min(kc.error, kc.count)
            if lower <= 0:
                continue
            if kc.prefix_samples:
                sizes.observe(kc.key_hash, kc.reusable_prefix_blocks, kc.prefix_samples, weight)
            counts[kc.key_hash] = counts.get(kc.key_hash, 0.0) + lower * weight
            if kc.key:
                labels[kc.key_hash] = kc.key
        self.reports += 1
        if (self._ref_ms - self._t0_ms) / 1000.0 / self.half_life_s > _RENORMALIZE_HALF_LIVES:
            self._rebase(self._ref_ms)
        return True

    def _spread(self, window_ms: int) -> float:
        """Mean of 2^(−(end − u)/H) over the window: its counts spread evenly over it."""
        x = window_ms / 1000.0 / self.half_life_s * math.log(2)
        return -math.expm1(-x) / x if x > 0 else 1.0

    def _rebase(self, t0_ms: int) -> None:
        factor = 1.0 / self._weight(t0_ms)
        self._counts = {k: c * factor for k, c in self._counts.items()}
        self._total *= factor
        self._sizes.scale(factor)
        self._t0_ms = t0_ms

    def _scale(self) -> float:
        """Converts a count held at t0 into requests/s at t_ref (module docstring)."""
        if self.reports == 0:
            return 0.0
        h = self.half_life_s
        seen_s = max((self._ref_ms - self._first_ms) / 1000.0, 1e-3)
        warmup = 1.0 - float(2.0 ** (-seen_s / h))
        return math.log(2) / h / warmup / self._weight(self._ref_ms)

    def total_rate(self) -> float:
        return self._total * self._scale()

    def snapshot(self) -> RateSnapshot:
        scale = self._scale()
        hashes = np.fromiter(self._counts.keys(), dtype=np.uint64, count=len(self._counts))
        rates = np.fromiter(self._counts.values(), dtype=np.float64, count=len(self._counts))
        rates *= scale
        return RateSnapshot(
            hashes, rates, dict(self._labels), self._total * scale, self._ref_ms,
            self._sizes.means(),
        )  # fmt: skip

    def prune(self) -> int:
        """Forget keys below MIN_RATE and all but the max_keys highest; returns how many."""
        scale = self._scale()
        if scale <= 0:
            return 0
        floor = MIN_RATE / scale
        keep = {k: c for k, c in self._counts.items() if c >= floor}
        if len(keep) > self.max_keys:
            ranked = sorted(keep.items(), key=lambda kv: kv[1], reverse=True)
            keep = dict(ranked[: self.max_keys])
        dropped = len(self._counts) - len(keep)
        if dropped:
            self._counts = keep
            self._labels = {k: v for k, v in self._labels.items() if k in keep}
            self._sizes.keep(keep)
        return dropped

    def to_bytes(self) -> bytes:
        """The whole state (``from_bytes`` reads it): header JSON, then per-key arrays."""
        header = {
            "half_life_s": self.half_life_s,
            "t0_ms": self._t0_ms,
            "first_ms": self._first_ms,
            "ref_ms": self._ref_ms,
            "total": self._total,
            "cursor": self.cursor,
            "reports": self.reports,
            "keys": len(self._counts),
            "sized": len(self._sizes),
        }
        head = json.dumps(header, sort_keys=True).encode()
        hashes = np.fromiter(self._counts.keys(), dtype="<u8", count=len(self._counts))
        counts = np.fromiter(self._counts.values(), dtype="<f8", count=len(self._counts))
        labels = [self._labels.get(int(h), "").encode() for h in hashes.tolist()]
        lengths = np.array([len(lb) for lb in labels], dtype="<u4")
        return b"".join(
            [
                _MAGIC,
                _LEN.pack(len(head)),
                head,
                hashes.tobytes(),
                counts.tobytes(),
                lengths.tobytes(),
                *labels,
                self._sizes.to_bytes(),
            ]
        )

    @classmethod
    def from_bytes(cls, data: bytes, half_life_s: float, *, max_keys: int) -> RateEstimator:
        """Restore a saved state; under a different configured half-life the current rates are
        kept and new reports decay with the new one."""
        try:
            if data[:4] != _MAGIC:
                raise RateStateError("not a rate-estimator state (bad magic)")
            (head_len,) = _LEN.unpack_from(data, 4)
            offset = 8 + head_len
            header = json.loads(data[8:offset])
            n = int(header["keys"])
            hashes = np.frombuffer(data, dtype="<u8", count=n, offset=offset).tolist()
            offset += 8 * n
            counts = np.frombuffer(data, dtype="<f8", count=n, offset=offset).tolist()
            offset += 8 * n
            lengths = np.frombuffer(data, dtype="<u4", count=n, offset=offset).tolist()
            offset += 4 * n
        except (struct.error, ValueError, KeyError, TypeError) as exc:
            raise RateStateError(f"rate-estimator state is corrupt: {exc}") from exc
        est = cls(float(header["half_life_s"]), max_keys=max_keys)
        est._counts = dict(zip(hashes, counts, strict=True))
        for h, length in zip(hashes, lengths, strict=True):
            if length:
                est._labels[h] = data[offset : offset + length].decode()
            offset += length
        try:  # states saved before sizes were reported have no "sized" section
            est._sizes = SizeEstimate.from_bytes(data, offset, int(header.get("sized", 0)))
        except ValueError as exc:
            raise RateStateError(f"rate-estimator state is corrupt: {exc}") from exc
        est._t0_ms, est._first_ms = int(header["t0_ms"]), int(header["first_ms"])
        est._ref_ms, est._total = int(header["ref_ms"]), float(header["total"])
        est.cursor, est.reports = str(header["cursor"]), int(header["reports"])
        if half_life_s != est.half_life_s:
            est._change_half_life(half_life_s)
        return est

    def _change_half_life(self, half_life_s: float) -> None:
        """Adopt a new half-life keeping today's rates (older history is re-weighted)."""
        self._rebase(self._ref_ms)
        before = self._scale()
        self.half_life_s = half_life_s
        after = self._scale()
        factor = before / after if after > 0 else 1.0
        self._counts = {k: c * factor for k, c in self._counts.items()}
        self._total *= factor
