"""Replay of the Weka Claude Code sessions (JSONL, gzipped or not; 64-token ids local to a session).

One line per request, sorted by session: ``session``, ``agent``, ``t`` (s since the session
start), ``in``, ``out`` and ``hash_ranges``, the request's 64-token block ids as inclusive runs.
Ids are local to a session; within one they form a tree (every id has one parent, checked on the
file), so they are prefix identities once namespaced. There are ``in // 64`` ids: the trailing
partial block has none. Replay choices:

* **Sessions.** Sessions have no absolute start. A replay draws session *instances* as a
  stationary Poisson process: instances of each recorded session start at rate
  ``qps / (requests per session) / sessions`` over ``[-span, duration)``, so sessions already under
  way at t = 0 are included and the mean request rate is ``qps``. Per-session relative times are
  kept unscaled (think times and tool latencies are real behaviour; compressing them would
  change the reuse distances the cache sees). A recorded session can be replayed by several
  instances; each is a separate user: its own key, its own block namespace.
* **Key.** One key per instance, ``cc:<session>#<instance>`` (the session is the natural affinity
  scope of a coding agent).
* **Blocks.** Each 64-token id becomes 4 sub-block ids ``mix(mix(ns, id), j)``; the trailing
  partial block gets an id of its own (nothing else can share it), so a request has
  ``ceil(in / 16)`` blocks.
* **Seed.** The seed draws the instances (which sessions, when). Block ids depend on it only
  through the instance namespaces.

A window shorter than the sessions starts cold: an instance's first request in the window misses
its earlier context, as a real cluster's cache would after a restart.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dataplane.core.keys import hash_key
from sim.gc_pause import gc_paused
from sim.types import SimRequest
from sim.workloads.blocks import I64, mix, mix_int, sub_blocks, to_tuples
from sim.workloads.mooncake import TraceError

F64 = npt.NDArray[np.float64]
COARSE_TOKENS = 64
_TAG_INSTANCE, _TAG_TAIL = (mix_int(0xC1A0DE, i) for i in range(2))
_TAIL_ID = 1 << 40  # pseudo local id of request r's trailing partial block: _TAIL_ID + r


@dataclass(frozen=True, eq=False)
class ClaudeCodeTrace:
    """Parsed sessions; request arrays in file order (grouped by session)."""

    path: Path
    sessions: tuple[str, ...]
    session: I64  # per request: index into sessions
    t: F64
    input_tokens: I64
    output_tokens: I64
    run_start: I64  # request r owns runs [run_start[r], run_start[r + 1])
    run_lo: I64
    run_hi: I64

    def __len__(self) -> int:
        return len(self.input_tokens)

    def ideal_hit(self) -> float:
        """Token-weighted infinite-cache hit within each session, in file order.

        The ids form a tree per session, so the blocks already seen are a leading run and it is
        enough to count them.
        """
        hit = np.zeros(len(self), dtype=np.int64)
        lo, hi, rs = self.run_lo.tolist(), self.run_hi.tolist(), self.run_start.tolist()
        seen = np.zeros(0, dtype=bool)
        for r, s in enumerate(self.session.tolist()):
            if r == 0 or s != self.session[r - 1]:
                top = int(self.run_hi[rs[r] : rs[self._session_end(r)]].max())
                seen = np.zeros(top + 1, dtype=bool)
            runs = range(rs[r], rs[r + 1])
            hit[r] = sum(int(seen[lo[i] : hi[i] + 1].sum()) for i in runs)
            for i in runs:
                seen[lo[i] : hi[i] + 1] = True
        tokens = np.minimum(hit * COARSE_TOKENS, self.input_tokens)
        return float(tokens.sum() / self.input_tokens.sum())

    def _session_end(self, r: int) -> int:
        return int(np.searchsorted(self.session, self.session[r], side="right"))

    @functools.cached_property
    def spans(self) -> F64:
        """Per session: the time of its last request (s after its start)."""
        span = np.zeros(len(self.sessions))
        np.maximum.at(span, self.session, self.t)
        return span


@functools.cache
def _read(path: Path, mtime_ns: int) -> ClaudeCodeTrace:
    names: dict[str, int] = {}
    session: list[int] = []
    t: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    n_runs: list[int] = []
    lo: list[int] = []
    hi: list[int] = []
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rt") if gzipped else path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                session.append(names.setdefault(row["session"], len(names)))
                t.append(float(row["t"]))
                inp.append(int(row["in"]))
                out.append(int(row["out"]))
                ranges = row["hash_ranges"]
            except (ValueError, KeyError, TypeError) as exc:
                raise TraceError(f"{path}:{line_no}: not a Claude Code record ({exc})") from exc
            if sum(b - a + 1 for a, b in ranges) != inp[-1] // COARSE_TOKENS:
                raise TraceError(f"{path}:{line_no}: hash_ranges do not cover in // 64 blocks")
            n_runs.append(len(ranges))
            lo.extend(a for a, _ in ranges)
            hi.extend(b for _, b in ranges)
    sess = np.array(session, dtype=np.int64)
    if len(sess) == 0 or np.any(np.diff(sess) < 0):
        raise TraceError(f"{path}: no requests, or requests not grouped by session")
    return ClaudeCodeTrace(
        path=path,
        sessions=tuple(names),
        session=sess,
        t=np.array(t),
        input_tokens=np.array(inp, dtype=np.int64),
        output_tokens=np.array(out, dtype=np.int64),
        run_start=np.concatenate(([0], np.cumsum(n_runs))).astype(np.int64),
        run_lo=np.array(lo, dtype=np.int64),
        run_hi=np.array(hi, dtype=np.int64),
    )


def read_claude_code(path: str | Path) -> ClaudeCodeTrace:
    """Parse the sessions file; cached per path (and modification time) in this process."""
    p = Path(path).resolve()
    if not p.is_file():
        raise TraceError(f"trace path {p} is not a file")
    return _read(p, p.stat().st_mtime_ns)


@dataclass(frozen=True, eq=False)
class Replay:
    """A sampled replay, by arrival: instance and recorded request of each arrival."""

    instance: I64
    request: I64  # index into the trace's requests
    arrival_s: F64
    instance_session: I64  # per instance: index into the trace's sessions
    seed: int


@dataclass
class ClaudeCodeWorkload:
    """Replay of the Claude Code sessions at a target QPS (see the module docstring)."""

    path: str | Path
    name: str = field(default="trace", init=False)

    def __post_init__(self) -> None:
        read_claude_code(self.path)

    def trace(self) -> ClaudeCodeTrace:
        """The parsed sessions."""
        return read_claude_code(self.path)

    def sample(self, *, qps: float, duration_s: float, seed: int) -> Replay:
        """Which recorded requests arrive when: stationary instances, cut to [0, duration_s)."""
        if not qps > 0 or not duration_s > 0:
            raise TraceError(f"qps and duration_s must be > 0; got {qps}, {duration_s}")
        tr = self.trace()
        rng = np.random.default_rng(seed & ((1 << 64) - 1))
        n_sess = len(tr.sessions)
        rate = qps / (len(tr) / n_sess) / n_sess  # instance starts per second, per session
        count = rng.poisson(rate * (tr.spans + duration_s))
        inst_sess = np.repeat(np.arange(n_sess), count)
        start = rng.uniform(-tr.spans[inst_sess], duration_s)

        # Requests of session s sorted by t sit at one offset in a composite sort key.
        width = float(tr.spans.max()) + duration_s + 1.0
        order = np.lexsort((tr.t, tr.session))
        composite = tr.session[order] * width + tr.t[order]
        lo = np.searchsorted(composite, inst_sess * width - start, side="left")
        hi = np.searchsorted(composite, inst_sess * width + duration_s - start, side="left")
        size = hi - lo
        inst = np.repeat(np.arange(len(size)), size)
        req = order[np.repeat(lo - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))]
        arrival = start[inst] + tr.t[req]
        by_time = np.argsort(arrival, kind="stable")
        return Replay(inst[by_time], req[by_time], arrival[by_time], inst_sess, seed)

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        return self.build(self.sample(qps=qps, duration_s=duration_s, seed=seed))

    def build(self, replay: Replay) -> list[SimRequest]:
        """The request records of a sampled replay."""
        tr = self.trace()
        inst, req, arrival, seed = replay.instance, replay.request, replay.arrival_s, replay.seed
        tokens = tr.input_tokens[req]
        tail = tokens % COARSE_TOKENS > 0
        runs = np.diff(tr.run_start)[req] + tail
        run_base = np.cumsum(runs) - runs
        n_runs = int(runs.sum())
        # Real runs of each request, then its tail pseudo-run (a single id) when it has one.
        first_run = np.repeat(tr.run_start[req] - run_base, runs) + np.arange(n_runs)
        is_tail = np.zeros(n_runs, dtype=bool)
        is_tail[(run_base + runs - 1)[tail]] = True
        lo = np.where(is_tail, _TAIL_ID, tr.run_lo[np.where(is_tail, 0, first_run)])
        lo[is_tail] += req[tail]
        hi = np.where(is_tail, lo, tr.run_hi[np.where(is_tail, 0, first_run)])
        length = hi - lo + 1
        ids_per_req = np.add.reduceat(length, run_base) if len(req) else length
        coarse_start = np.concatenate(([0], np.cumsum(ids_per_req))).astype(np.int64)
        local = np.repeat(lo - (np.cumsum(length) - length), length) + np.arange(int(length.sum()))
        ns = mix(mix_int(_TAG_INSTANCE, seed), inst.astype(np.uint64))
        coarse = mix(np.repeat(ns, ids_per_req), local.astype(np.uint64))
        ids, starts = sub_blocks(coarse, coarse_start, tokens, COARSE_TOKENS)
        blocks = to_tuples(ids, starts)

        keys: dict[int, tuple[str, int]] = {}
        for i in np.unique(inst).tolist():
            k = f"cc:{tr.sessions[int(replay.instance_session[i])]}#{i}"
            keys[i] = (k, hash_key(k))
        columns = zip(
            arrival.tolist(),
            inst.tolist(),
            blocks,
            tokens.tolist(),
            tr.output_tokens[req].tolist(),
            strict=True,
        )
        with gc_paused():
            return [SimRequest(a, keys[i][0], keys[i][1], b, p, o, i) for a, i, b, p, o in columns]
