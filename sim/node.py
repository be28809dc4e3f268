"""One destination: continuous batching with chunked prefill over a prefix KV cache.

The scheduler follows vLLM V1's shape. Each step first gives every decoding request one token of
the step's token budget, then continues the prefills already running (in admission order), then
admits waiting requests first-come first-served while budget, the running-sequence limit and KV
space allow; a request that does not fit in KV blocks the queue behind it (vLLM does the same).
A request's prefill starts after its cached prefix; its first token comes out at the end of the
step that computes its last prompt token, and every later step adds one token until its output
length is reached. When it finishes, the full blocks of its output join its chain in the cache
(``cache_outputs``, on by default, as vLLM V1 and SGLang do), so the next turn of a conversation
can reuse the previous answer.

Speed: decoding requests are not touched step by step. The node keeps their count, the sum of
their context lengths (the decode cost's input) and a heap of the step index at which each
finishes, so a step costs O(prefill chunks + finishing requests), not O(running requests).
:meth:`Node.advance` runs a node's steps up to a time in one call, and a stretch of steps that
only decode and finish nothing (most steps of a run) in a loop of a few float operations each.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from sim.cache_impl import BlockCache, new_prefix_cache
from sim.engine_model import EngineProfile
from sim.types import SimRequest

_NEVER = 1 << 62  # a step index no finishing request reaches


class Job:
    """A request's life on a node. Times in simulated seconds; -1 means "not yet"."""

    __slots__ = (
        "arrival",
        "blocks",
        "cached",
        "computed",
        "filled",
        "finish",
        "first_token",
        "node",
        "output",
        "output_blocks",
        "prompt",
        "rejected",
        "rid",
        "total_blocks",
    )

    def __init__(self, rid: int, request: SimRequest) -> None:
        self.rid = rid
        self.arrival = request.arrival_s
        self.prompt = max(1, request.prompt_tokens)
        self.output = max(1, request.output_tokens)
        self.blocks = request.blocks
        self.output_blocks = request.output_blocks
        self.cached = 0  # prompt tokens served from the cache (decided at admission)
        self.computed = 0  # prompt tokens whose KV exists (cached + prefilled so far)
        self.filled = 0  # leading prompt blocks held pinned in the cache
        self.total_blocks = 0  # KV footprint: prompt + output blocks
        self.first_token = -1.0
        self.finish = -1.0
        self.node = -1
        self.rejected = False


class Node:
    """A destination's scheduler state; the event loop calls ``start_step`` then ``end_step``."""

    def __init__(
        self,
        index: int,
        profile: EngineProfile,
        *,
        cache: BlockCache | None = None,
        window: tuple[float, float] = (0.0, float("inf")),
        on_finish: Callable[[Job, float], None] | None = None,
        cache_outputs: bool = True,
    ) -> None:
        self.index = index
        self.profile = profile
        self.cache = cache if cache is not None else new_prefix_cache(profile.kv_blocks)
        self.waiting: deque[Job] = deque()
        self.prefilling: list[Job] = []
        self.decoding = 0
        self.decode_context = 0
        self.busy = False
        self.on_finish = on_finish
        self.cache_outputs = cache_outputs
        self._finishing: list[tuple[int, int, Job]] = []  # (last step, rid, job)
        self._chunks: list[tuple[Job, int]] = []
        self._step = 0
        self.step_end = float("inf")  # when the step in flight ends (inf: idle); advance() keeps it
        self._window = window
        self._ttft_offset = profile.ttft_offset_ms / 1000.0
        # Work inside the measurement window.
        self.busy_s = 0.0
        self.prefill_s = 0.0
        self.prefilled_tokens = 0
        self.prefilled_total = 0  # over the whole run (accounting checks)
        self.rejected = 0

    @property
    def load(self) -> int:
        """Running + waiting requests: what a node agent reports to the routers."""
        return len(self.waiting) + len(self.prefilling) + self.decoding

    def enqueue(self, job: Job) -> None:
        job.node = self.index
        self.waiting.append(job)

    # -- steps up to a time -----------------------------------------------------------------------

    def advance(self, until: float) -> None:
        """Run every step that ends before ``until``; an event at ``until`` itself comes first.

        Nodes do not touch one another, so a cluster may run a node's steps late, when something
        reads it (a request routed to it, a snapshot of its load, its cache), with the same result
        as running every node's steps in time order. A step started here is kept in
        ``step_end``; :meth:`start_step` callers outside ``advance`` set it themselves.
        """
        t = self.step_end
        finishing = self._finishing
        while t < until:
            if (
                self._chunks
                or self.prefilling
                or self.waiting
                or (finishing and finishing[0][0] <= self._step)
            ):
                self.end_step(t)
                dt = self.start_step(t)
                t = t + dt if dt > 0.0 else float("inf")
            else:
                t = self._coast(t, until)
        self.step_end = t

    def _coast(self, t: float, until: float) -> float:
        """Steps that only decode and finish nothing, from the one ending at ``t``: the same float
        operations as :meth:`end_step` then :meth:`start_step` (the decode part of
        :meth:`EngineProfile.step_ms`), without their bookkeeping. A change to that formula must
        be made here too; ``test_advance_gives_the_results_of_stepping_event_by_event`` fails
        until it is."""
        profile = self.profile
        base = profile.decode_base_ms
        per_context = profile.decode_ms_per_context
        start, stop = self._window
        last = self._finishing[0][0] if self._finishing else _NEVER
        step = self._step
        decoding = self.decoding
        context = self.decode_context
        busy = self.busy_s
        while t < until and step < last:
            step += 1
            context += decoding
            dt = (base + per_context * context) / 1000.0
            if start <= t < stop:
                busy += dt
            t = t + dt
        self._step = step
        self.decode_context = context
        self.busy_s = busy
        return t

    # -- one step ---------------------------------------------------------------------------------

    def start_step(self, now: float) -> float:
        """Schedule a step at ``now``; return its duration in seconds (0.0: nothing to run)."""
        profile = self.profile
        if not self.prefilling and not self.waiting:  # decode only: most steps of a run
            if not self.decoding:
                self.busy = False
                return 0.0
            self.busy = True
            step_ms = profile.step_ms(0.0, self.decoding, self.decode_context)
            if self._window[0] <= now < self._window[1]:
                self.busy_s += step_ms / 1000.0
            return step_ms / 1000.0
        budget = profile.max_batched_tokens - self.decoding
        chunks = self._chunks
        chunks.clear()
        prefill_ms = 0.0
        for job in self.prefilling:
            if budget <= 0:
                break
            n = min(job.prompt - job.computed, budget)
            budget -= n
            prefill_ms += self._chunk(job, n)
        if self.waiting and budget > 0:
            prefill_ms, budget = self._admit(prefill_ms, budget)
        if not chunks and not self.decoding:
            self.busy = False
            return 0.0
        self.busy = True
        step_ms = profile.step_ms(prefill_ms, self.decoding, self.decode_context)
        tokens = sum(n for _, n in chunks)
        self.prefilled_total += tokens
        if self._window[0] <= now < self._window[1]:
            self.busy_s += step_ms / 1000.0
            if prefill_ms > 0.0:
                self.prefill_s += (profile.prefill_overhead_ms + prefill_ms) / 1000.0
                self.prefilled_tokens += tokens
        return step_ms / 1000.0

    def end_step(self, now: float) -> None:
        """Apply the step scheduled by :meth:`start_step`, which ends at ``now``."""
        step = self._step
        self._step = step + 1
        self.decode_context += self.decoding  # every decoding request produced one token
        finishing = self._finishing
        while finishing and finishing[0][0] <= step:
            job = heapq.heappop(finishing)[2]
            self.decoding -= 1
            self.decode_context -= job.prompt + job.output
            self._finish(job, now)
        if not self._chunks:  # decode only
            return
        done = False
        for job, n in self._chunks:
            job.computed += n
            if job.computed < job.prompt:
                continue
            done = True
            job.first_token = now + self._ttft_offset
            if job.output == 1:
                self._finish(job, now)
            else:
                self.decoding += 1
                self.decode_context += job.prompt + 1
                heapq.heappush(finishing, (step + job.output - 1, job.rid, job))
        self._chunks.clear()
        if done:
            self.prefilling = [j for j in self.prefilling if j.computed < j.prompt]

    # -- internals --------------------------------------------------------------------------------

    def _chunk(self, job: Job, n: int) -> float:
        """Schedule ``n`` prompt tokens of ``job``: pin their full blocks, return their cost."""
        end = job.computed + n
        blocks = job.blocks
        upto = len(blocks) if end >= job.prompt else end // self.profile.block_tokens
        if upto > job.filled:
            self.cache.fill(blocks[job.filled : upto])
            job.filled = upto
        self._chunks.append((job, n))
        return self.profile.prefill_chunk_ms(n, end)

    def _admit(self, prefill_ms: float, budget: int) -> tuple[float, int]:
        """Admit waiting requests FCFS while budget, running slots and KV space allow."""
        profile = self.profile
        cache = self.cache
        block_tokens = profile.block_tokens
        waiting = self.waiting
        running = len(self.prefilling) + self.decoding
        while waiting and budget > 0 and running < profile.max_running:
            job = waiting[0]
            blocks = job.blocks
            hit, unpinned = cache.match(blocks)
            total = max(len(blocks), -(-(job.prompt + job.output) // block_tokens))
            if not cache.admit(blocks, hit, unpinned, total - hit):
                if total > cache.capacity:  # can never fit: refuse it instead of blocking
                    waiting.popleft()
                    job.rejected = True
                    self.rejected += 1
                    continue
                break
            waiting.popleft()
            job.total_blocks = total
            job.filled = hit
            job.cached = job.computed = min(hit * block_tokens, job.prompt - 1)
            self.prefilling.append(job)
            running += 1
            n = min(job.prompt - job.computed, budget)
            budget -= n
            prefill_ms += self._chunk(job, n)
        return prefill_ms, budget

    def _finish(self, job: Job, now: float) -> None:
        job.finish = now
        reserved = job.total_blocks - job.filled
        if self.cache_outputs and job.output_blocks:
            reserved -= self.cache.store(job.output_blocks, reserved)
        self.cache.release(job.blocks[: job.filled], reserved)
        if self.on_finish is not None:
            self.on_finish(job, now)
