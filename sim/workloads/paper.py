"""The paper's semi-synthetic multi-tenant assistant workload (PAPER.md §2.1, Table 6).

A request is one turn of a customer-support conversation *thread* of one business *key*. Its
prompt is, in order (each part a segment for :func:`sim.workloads.blocks.segment_blocks`):

    template (96) | business context (180) | retrieved block | history | current turn

* template: one global instruction header shared by every business (96 tokens, 6 blocks; the
  paper gives no size: a short header, which leaves room for a retrieved block of useful size).
* context: 180 tokens per business (Table 6: ≈ 180 tokens, 15% of the prompt).
* retrieved (RAG) block: drawn per request from the business's 32 few-shot documents with Zipf
  popularity; the exponent is solved so two requests pick the same document with probability
  0.33, i.e. 67% of consecutive same-key pairs break their exact prefix at this block (Table 6).
  Lengths are uniform in [109, 327) per document (mean 218: the remainder of the 1.2K mean once
  the other parts are set).
* history: every earlier turn of the thread, user message then assistant answer. It follows the
  retrieved block, so a changed document also breaks the history's reuse (the point of the 67%).
* current turn: the user's message, lognormal with median 90 and σ 0.75 (mean ≈ 119 tokens, so
  ≈ 90% of prompt tokens precede it; Table 6). The paper gives no message sizes.

Answers (``output_tokens``, which reappear in the next turn's history): lognormal with median 129
tokens, the median output of the Azure 2023 *conversation* trace, and σ 0.7, capped at 1,024. The
paper gives no output lengths; Azure's conversation service is the public chat trace closest to a
support assistant, and its long tail (mean 211, from general long-form chat) is narrowed because
support answers are a few short paragraphs.

Threads (Table 6: 2.64 requests per thread, 80.8% of requests in multi-turn threads): a thread
has one turn with probability 0.192 × 2.64 = 0.507, else 1 + Geometric(0.3007) turns (mean 4.33),
which meets both numbers exactly. Thread starts are a Poisson process whose key is drawn by
popularity (so per-key traffic follows the popularity shares); consecutive turns are a think time
apart, lognormal with median 131 s and σ 0.98: the fit to the gaps between consecutive requests of
one conversation (``hash_ids[:2]``) in the Mooncake conversation trace (median 123 s, p90 480 s).
The stream is stationary from t = 0: threads already under way at t = 0 are included (drawn
size-biased by their span), their earlier turns present only as history.

Arrival instants come from the chosen aggregate process (:mod:`sim.workloads.arrivals`); the k-th
arrival is given to the k-th turn in time order of the thread model. This rank mapping makes the
aggregate process exact and bends the thread timeline only by a few gaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sim.gc_pause import gc_paused
from sim.types import BLOCK_TOKENS, SimRequest
from sim.workloads.arrivals import AZURE_CONV, BOOTSTRAP_BLOCK, GAMMA_CV, ArrivalProcess
from sim.workloads.blocks import I64, U64, mix, mix_int, segment_blocks, to_tuples
from sim.workloads.paper_shape import (
    ANSWER,
    CONTEXT_TOKENS,
    CURRENT,
    RAG_DOCS,
    RAG_MEAN_TOKENS,
    RAG_SAME,
    TEMPLATE_TOKENS,
    THINK_MEDIAN_S,
    THINK_SIGMA,
    PaperShape,
    lognormal_tokens,
    shape_options,
)
from sim.workloads.paper_threads import MEAN_THREAD, Threads, threads
from sim.workloads.popularity import Population, paper_active_set

F64 = npt.NDArray[np.float64]


_TAG_TEMPLATE, _TAG_CONTEXT, _TAG_RAG, _TAG_THREAD, _TAG_RAG_LEN = (
    mix_int(0xC0FFEE, i) for i in range(5)
)
TEMPLATE_ID = mix_int(_TAG_TEMPLATE, 0)


@dataclass(frozen=True, eq=False)
class PaperStream:
    """A generated stream with its structure (what tests and stats read), in arrival order."""

    active: Population
    arrival_s: F64
    key: I64  # index into active
    thread: I64
    turn: I64  # 0-based turn within the thread
    thread_len: I64
    rag_doc: I64
    rag_tokens: I64
    history_tokens: I64
    current_tokens: I64
    prompt_tokens: I64
    output_tokens: I64
    block_ids: U64
    block_start: I64
    output_ids: U64 | None = None  # full blocks of prompt + output past the prompt's full blocks
    output_start: I64 | None = None

    def requests(self) -> list[SimRequest]:
        """The stream as the simulator's request records."""
        names, hashes = self.active.names, self.active.hashes
        blocks = to_tuples(self.block_ids, self.block_start)
        n = len(self.arrival_s)
        if self.output_ids is None or self.output_start is None:
            outputs: list[tuple[int, ...]] = [()] * n
        else:
            outputs = to_tuples(self.output_ids, self.output_start)
        columns = zip(
            self.arrival_s.tolist(),
            self.key.tolist(),
            blocks,
            self.prompt_tokens.tolist(),
            self.output_tokens.tolist(),
            self.thread.tolist(),
            outputs,
            self.turn.tolist(),
            strict=True,
        )
        with gc_paused():
            return [
                SimRequest(t, names[k], hashes[k], b, p, o, th, ob, u)
                for t, k, b, p, o, th, ob, u in columns
            ]


def _schedule(
    rng: np.random.Generator, n: int, qps: float, duration_s: float, think: tuple[float, float]
) -> tuple[Threads, I64]:
    """Threads, and the flat indices of the turns given the first ``n`` arrivals, in time order."""
    horizon = duration_s * 1.25 + 60.0
    while True:
        th = threads(rng, qps / MEAN_THREAD, horizon, think)
        when = np.repeat(th.start, th.length) + th.offset
        live = np.flatnonzero((when >= 0) & (when < horizon))
        if len(live) >= n:
            return th, live[np.argsort(when[live], kind="stable")[:n]]
        horizon *= 2


def _segments(
    th: Threads,
    thread: I64,
    turn: I64,
    uid: U64,
    lens: tuple[I64, I64],
    head: tuple[U64, I64],
    answer: bool = False,
) -> tuple[U64, I64, I64]:
    """Segments of each request: template, context, rag, (cur_j, ans_j) for j < turn, current.

    ``lens`` are the per-turn (current, answer) lengths; ``head`` holds, per request, the ids and
    lengths of its first three segments, three consecutive entries per request. With ``answer``
    the request's own answer follows as one more segment (the sequence after it finishes).
    """
    cur_len, ans_len = lens
    count = 4 + 2 * turn + int(answer)
    seg_start = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
    req = np.repeat(np.arange(len(turn)), count)
    pos = np.arange(int(seg_start[-1])) - seg_start[:-1][req]
    last = count[req] - 1
    is_current = pos == last - int(answer)
    is_own = (pos == last) & answer
    t_of = np.where(is_current | is_own, turn[req], np.maximum(pos - 3, 0) // 2)
    kind = np.where(is_current, 0, np.where(is_own, 1, np.maximum(pos - 3, 0) % 2))
    flat_turn = th.base[thread[req]] + t_of
    seg_ids = mix(uid[thread[req]], (2 * t_of + kind).astype(np.uint64))
    seg_lens = np.where(kind == 0, cur_len[flat_turn], ans_len[flat_turn]).astype(np.int64)
    first3 = (seg_start[:-1, None] + np.arange(3)).ravel()
    seg_ids[first3], seg_lens[first3] = head
    return seg_ids, seg_lens, seg_start


def _output_blocks(seq_ids: U64, seq_start: I64, prompt: I64, output: I64) -> tuple[U64, I64]:
    """Per request: the full blocks of prompt + output past the prompt's full blocks."""
    lo = prompt // BLOCK_TOKENS
    hi = (prompt + output) // BLOCK_TOKENS
    count = hi - lo
    start = np.concatenate(([0], np.cumsum(count))).astype(np.int64)
    local = np.arange(int(start[-1]), dtype=np.int64) - np.repeat(start[:-1], count)
    return seq_ids[np.repeat(seq_start[:-1] + lo, count) + local], start


def generate(
    active: Population,
    arrival: ArrivalProcess,
    qps: float,
    duration_s: float,
    seed: int,
    shape: PaperShape | None = None,
) -> PaperStream:
    """Generate the paper workload over ``active`` keys (see the module docstring)."""
    shape = shape or PaperShape()
    rng = np.random.default_rng(seed & ((1 << 64) - 1))
    times = arrival.times(rng, qps, duration_s)
    n = len(times)
    th, turn_idx = _schedule(rng, n, qps, duration_s, (shape.think_median_s, shape.think_sigma))
    n_threads, n_turns = len(th.length), len(th.offset)
    thread_key = rng.choice(len(active), n_threads, p=active.weights)
    uid = mix(mix_int(_TAG_THREAD, seed), np.arange(n_threads, dtype=np.uint64))
    cur_len = lognormal_tokens(rng, CURRENT, n_turns)
    ans_len = lognormal_tokens(rng, shape.answer, n_turns)
    cum = np.cumsum(cur_len + ans_len) - (cur_len + ans_len)
    history_all = cum - np.repeat(cum[th.base], th.length)

    thread = np.repeat(np.arange(n_threads), th.length)[turn_idx]
    turn = turn_idx - th.base[thread]
    key = thread_key[thread]
    key_hash = np.array(active.hashes, dtype=np.uint64)[key]
    if shape.rag_scope == "conversation":
        doc = rng.choice(shape.rag_docs, n_threads, p=shape.rag_p())[thread]
    else:
        doc = rng.choice(shape.rag_docs, n, p=shape.rag_p())
    rag_id = mix(mix(_TAG_RAG, key_hash), doc.astype(np.uint64))
    unit = (mix(_TAG_RAG_LEN, rag_id) >> np.uint64(11)).astype(np.float64) / 2.0**53
    rag_len = (shape.rag_tokens * (0.5 + unit)).astype(np.int64)

    template_id = (
        TEMPLATE_ID
        if shape.template_tokens == TEMPLATE_TOKENS
        else mix_int(_TAG_TEMPLATE, shape.template_tokens)
    )
    head_ids = np.stack((np.full(n, template_id, np.uint64), mix(_TAG_CONTEXT, key_hash), rag_id))
    head_lens = np.stack((np.full(n, shape.template_tokens), np.full(n, CONTEXT_TOKENS), rag_len))
    head = (head_ids.T.ravel(), head_lens.T.ravel())
    seg_ids, seg_lens, seg_start = _segments(th, thread, turn, uid, (cur_len, ans_len), head)
    block_ids, block_start = segment_blocks(seg_ids, seg_lens, seg_start)
    history = history_all[turn_idx]
    current = cur_len[turn_idx]
    prompt = shape.template_tokens + CONTEXT_TOKENS + rag_len + history + current
    output = ans_len[turn_idx]
    seq = _segments(th, thread, turn, uid, (cur_len, ans_len), head, answer=True)
    output_ids, output_start = _output_blocks(*segment_blocks(*seq), prompt, output)
    return PaperStream(
        active=active,
        arrival_s=times,
        key=key,
        thread=thread,
        turn=turn,
        thread_len=th.length[thread],
        rag_doc=doc,
        rag_tokens=rag_len,
        history_tokens=history,
        current_tokens=current,
        output_tokens=output,
        prompt_tokens=prompt,
        block_ids=block_ids,
        block_start=block_start,
        output_ids=output_ids,
        output_start=output_start,
    )


@dataclass
class PaperWorkload:
    """The paper workload over the top-``top_k`` keys (None: all 128,824)."""

    top_k: int | None = 128
    arrival: str = "poisson"
    cv: float = GAMMA_CV
    gaps_path: str | Path = AZURE_CONV
    bootstrap_block: int = BOOTSTRAP_BLOCK
    template_tokens: int = TEMPLATE_TOKENS
    rag_scope: str = "request"
    rag_docs: int = RAG_DOCS
    rag_same: float = RAG_SAME
    rag_tokens: int = RAG_MEAN_TOKENS
    think_median_s: float = THINK_MEDIAN_S
    think_sigma: float = THINK_SIGMA
    answer_median: float = ANSWER[0]
    answer_sigma: float = ANSWER[1]
    name: str = field(default="paper", init=False)

    def __post_init__(self) -> None:
        self.arrivals()
        self.shape()
        paper_active_set(self.top_k)

    def shape(self) -> PaperShape:
        """The prompt and conversation options as one validated record."""
        return PaperShape(**shape_options(self))

    def arrivals(self) -> ArrivalProcess:
        """The aggregate arrival process these options select."""
        return ArrivalProcess(self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block)

    def stream(self, *, qps: float, duration_s: float, seed: int) -> PaperStream:
        """The stream with its structure (for statistics and tests)."""
        active = paper_active_set(self.top_k)
        return generate(active, self.arrivals(), qps, duration_s, seed, self.shape())

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        return self.stream(qps=qps, duration_s=duration_s, seed=seed).requests()
