"""Replay of the Mooncake FAST'25 traces (JSONL with ``hash_ids`` of 512-token blocks).

Each line has ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``, chained ids
of the prompt's 512-token blocks (equal id = equal prefix through that block; the last block is
usually partial; ``len(hash_ids) == ceil(input_length / 512)``). Replay choices:

* **Key.** In the conversation trace every request starts with block 0 (a shared system prompt),
  so the business/session key is ``hash_ids[:2]``; in the synthetic trace it is ``hash_ids[0]``.
  ``key_blocks=None`` detects this (2 when every request starts with the same block, else 1).
* **Blocks.** Each 512-token id becomes 32 sub-block ids ``mix(mix(ns, id), j)`` (fewer for the
  last, partial block), ``ceil(input_length / 16)`` per request; ``ns`` comes from the file name.
  Prefix equality is kept exactly; sharing inside a 512-token block the trace does not record is
  not invented, so hit rates are those of the trace at 512-token granularity.
* **Time.** The conversation trace's timestamps are quantised (12,031 requests on 1,180 distinct
  values, ≈ 3 s apart; the synthetic trace has 11 ties). Requests sharing a timestamp get sorted
  uniform random instants, in file order, between it and the next distinct value: slot counts
  (the real burstiness) are kept, the unknown order inside a slot is Poisson-like. The gap CV is
  then 1.01 for both traces (3.03 raw for the conversation trace, an artefact of the ties; even
  spreading would make arrivals too regular, CV ≈ 0.4). Times are then scaled by
  ``natural rate / qps`` (natural rate = requests / (span + one mean gap)) and cut at
  ``duration_s``; a window longer than the scaled trace ends with the trace (one pass, no repeats).
* **Seed.** The seed draws the instants inside tied slots. Seed 0 replays from the start of the
  trace; any other seed starts at a seed-chosen request and wraps around to the beginning (a
  rotation, so a full pass still holds every request once). With ``arrival`` other than
  ``"trace"`` the trace order is kept and the instants come from that process
  (:mod:`sim.workloads.arrivals`), drawn with the seed. Block ids do not depend on the seed.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dataplane.core.keys import hash_key
from sim.gc_pause import gc_paused
from sim.types import SimRequest
from sim.workloads.arrivals import AZURE_CONV, BOOTSTRAP_BLOCK, GAMMA_CV, ArrivalProcess
from sim.workloads.blocks import I64, mix, mix_int, sub_blocks, to_tuples

F64 = npt.NDArray[np.float64]
COARSE_TOKENS = 512
_TAG = mix_int(0x300C, 0)


class TraceError(ValueError):
    """A trace file that cannot be read or replayed (missing, malformed, bad option)."""


@dataclass(frozen=True, eq=False)
class MooncakeTrace:
    """A parsed Mooncake trace (arrays in file order, which is time order)."""

    path: Path
    timestamp_ms: I64
    input_tokens: I64
    output_tokens: I64
    hash_start: I64  # request r owns hash_ids[hash_start[r]:hash_start[r + 1]]
    hash_ids: I64

    def __len__(self) -> int:
        return len(self.input_tokens)

    @functools.cached_property
    def shared_first_block(self) -> bool:
        """Whether every request starts with the same block (the conversation trace)."""
        return bool(np.all(self.hash_ids[self.hash_start[:-1]] == self.hash_ids[0]))

    def keys(self, key_blocks: int) -> list[str]:
        """Each request's key: its first ``key_blocks`` block ids."""
        ids = self.hash_ids.tolist()
        bounds = self.hash_start.tolist()
        return [
            "mc:" + ".".join(map(str, ids[a : min(a + key_blocks, b)]))
            for a, b in itertools.pairwise(bounds)
        ]

    def ideal_hit(self) -> float:
        """Token-weighted infinite-cache hit at 512-token granularity, in file order."""
        req = np.repeat(np.arange(len(self)), np.diff(self.hash_start))
        _, inverse = np.unique(self.hash_ids, return_inverse=True)
        first_req = np.full(int(inverse.max()) + 1, len(self), dtype=np.int64)
        np.minimum.at(first_req, inverse, req)
        seen = first_req[inverse] < req
        local = np.arange(len(req)) - self.hash_start[req]
        size = np.diff(self.hash_start)
        miss_at = np.where(seen, size[req], local)
        run = np.minimum.reduceat(miss_at, self.hash_start[:-1])
        hit = np.minimum(run * COARSE_TOKENS, self.input_tokens)
        return float(hit.sum() / self.input_tokens.sum())


def dequantise(ms: I64, rng: np.random.Generator) -> F64:
    """Seconds, with requests that share a timestamp spread at random up to the next one."""
    uniq, count = np.unique(ms, return_counts=True)
    step = np.diff(uniq).mean() if len(uniq) > 1 else 1000.0
    width = np.append(uniq[1:], uniq[-1] + step) - uniq
    group = np.repeat(np.arange(len(uniq)), count)
    u = rng.random(len(ms))
    u = u[np.lexsort((u, group))]  # sorted within each slot, so file order is kept
    return (uniq[group] + width[group] * np.where(count[group] > 1, u, 0.0)) / 1000.0


@functools.cache
def _read(path: Path, mtime_ns: int) -> MooncakeTrace:
    ts, inp, out, sizes, ids = [], [], [], [], []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                hashes = row["hash_ids"]
                ts.append(int(row["timestamp"]))
                inp.append(int(row["input_length"]))
                out.append(int(row["output_length"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceError(f"{path}:{line_no}: not a Mooncake record ({exc})") from exc
            if len(hashes) != -(-inp[-1] // COARSE_TOKENS):
                raise TraceError(f"{path}:{line_no}: hash_ids do not cover input_length")
            sizes.append(len(hashes))
            ids.extend(hashes)
    if not inp:
        raise TraceError(f"{path}: no requests")
    stamps = np.array(ts, dtype=np.int64)
    if np.any(np.diff(stamps) < 0):
        raise TraceError(f"{path}: timestamps are not sorted")
    return MooncakeTrace(
        path=path,
        timestamp_ms=stamps,
        input_tokens=np.array(inp, dtype=np.int64),
        output_tokens=np.array(out, dtype=np.int64),
        hash_start=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        hash_ids=np.array(ids, dtype=np.int64),
    )


def read_mooncake(path: str | Path) -> MooncakeTrace:
    """Parse a Mooncake JSONL trace; cached per path (and modification time) in this process."""
    p = Path(path).resolve()
    if not p.is_file():
        raise TraceError(f"trace path {p} is not a file")
    return _read(p, p.stat().st_mtime_ns)


@functools.cache
def _keys(trace: MooncakeTrace, key_blocks: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    names = trace.keys(key_blocks)
    memo: dict[str, int] = {}
    for k in names:
        if k not in memo:
            memo[k] = hash_key(k)
    return tuple(names), tuple(memo[k] for k in names)


@dataclass
class MooncakeWorkload:
    """Replay of a Mooncake trace at a target QPS (see the module docstring)."""

    path: str | Path
    key_blocks: int | None = None
    arrival: str = "trace"
    cv: float = GAMMA_CV
    gaps_path: str | Path = AZURE_CONV
    bootstrap_block: int = BOOTSTRAP_BLOCK
    name: str = field(default="trace", init=False)

    def __post_init__(self) -> None:
        if self.key_blocks not in (None, 1, 2):
            raise TraceError(f"key_blocks must be 1, 2 or None (detect); got {self.key_blocks}")
        if self.arrival != "trace":
            ArrivalProcess(self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block)
        read_mooncake(self.path)

    def trace(self) -> MooncakeTrace:
        """The parsed trace."""
        return read_mooncake(self.path)

    def key_block_count(self) -> int:
        """Leading blocks forming the key (detected unless given)."""
        if self.key_blocks is not None:
            return self.key_blocks
        return 2 if self.trace().shared_first_block else 1

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """The trace from a seed-chosen start, rescaled to ``qps``, cut at ``duration_s``."""
        if not qps > 0 or not duration_s > 0:
            raise TraceError(f"qps and duration_s must be > 0; got {qps}, {duration_s}")
        tr = self.trace()
        n = len(tr)
        rng = np.random.default_rng(seed & ((1 << 64) - 1))
        first = 0 if seed == 0 else int(rng.integers(n))
        order = (first + np.arange(n)) % n
        stamps = dequantise(tr.timestamp_ms, rng)
        t = stamps - stamps[0]
        period = t[-1] * n / (n - 1) if n > 1 else 1.0
        shifted = np.where(order >= first, t[order] - t[first], t[order] + period - t[first])
        if self.arrival == "trace":
            times = shifted * (n / period) / qps
            times = times[times < duration_s]
        else:
            process = ArrivalProcess(
                self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block
            )
            times = process.times(rng, qps, duration_s)[:n]
        pick = order[: len(times)]

        sizes = np.diff(tr.hash_start)[pick]
        coarse_start = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        flat = np.repeat(tr.hash_start[pick] - coarse_start[:-1], sizes) + np.arange(
            int(coarse_start[-1])
        )
        ns = mix_int(_TAG, int.from_bytes(hashlib.blake2b(tr.path.name.encode()).digest()[:8]))
        coarse = mix(ns, tr.hash_ids[flat].astype(np.uint64))
        tokens = tr.input_tokens[pick]
        ids, starts = sub_blocks(coarse, coarse_start, tokens, COARSE_TOKENS)
        blocks = to_tuples(ids, starts)
        names, hashes = _keys(tr, self.key_block_count())
        columns = zip(
            times.tolist(),
            pick.tolist(),
            blocks,
            tokens.tolist(),
            tr.output_tokens[pick].tolist(),
            strict=True,
        )
        with gc_paused():
            return [SimRequest(a, names[i], hashes[i], b, p, o) for a, i, b, p, o in columns]
