"""One simulated engine advanced in real time: :class:`sim.node.Node` driven by the wall clock.

Simulated seconds = wall seconds × ``speedup``. A step loop runs the node's steps back to back
while it has work: ``start_step`` at simulated time *t* returns the step's modelled duration
*dt*; the loop sleeps until the wall clock reaches *t + dt* (divided by the speed-up), then calls
``end_step`` and tells the requests whose first token or last token that step produced. The
next step starts where this one ended, so the engine does exactly the modelled work per unit of
time; if the process falls more than ``max_lag_s`` (simulated) behind the wall clock (a starved
CPU), the loop re-synchronises and that time is lost, as it would be on an overloaded host.

``slowdown`` (default 1; set at run time, ``POST /admin/slowdown``) multiplies every step's
modelled duration: the engine does the same work more slowly, as a throttled or degraded GPU
would. It exists to inject a latency regression in tests of the live guard.

Requests arrive in between steps (``submit``) and join the node's waiting queue; an idle engine
wakes at once. Nothing here knows HTTP: :mod:`simengine.api` turns requests into
:class:`EngineRequest` and waits on the :class:`Ticket` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable

from sim.cache_impl import new_prefix_cache
from sim.engine_model import EngineProfile
from sim.node import Job, Node
from sim.types import SimRequest
from simengine.kv_events import KvEventPublisher
from simengine.stats import EngineStats
from simengine.tickets import EngineRequest, RequestTooLargeError, Ticket

DEFAULT_MAX_LAG_S = 1.0
MAX_SLOWDOWN = 1000.0


class SimEngine:
    """A real-time engine over one simulated destination (module docstring)."""

    def __init__(
        self,
        profile: EngineProfile,
        *,
        speedup: float = 1.0,
        max_lag_s: float = DEFAULT_MAX_LAG_S,
        clock: Callable[[], float] = time.monotonic,
        kv_events: KvEventPublisher | None = None,
    ) -> None:
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.profile = profile
        self.speedup = speedup
        self.slowdown = 1.0
        self.max_lag_s = max_lag_s
        self.stats = EngineStats()
        self._clock = clock
        self._t0 = clock()
        self.started_at_unix = time.time()
        self.kv_events = kv_events  # vLLM's KV-cache events of the cache, published per step
        self.node = self._new_node()
        self.steps = 0  # engine steps completed
        self._rids = itertools.count()
        self._tickets: dict[int, Ticket] = {}
        self._finished: list[Job] = []
        self._wake = asyncio.Event()
        self._step_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        """Stop stepping; requests still in flight end with ``EngineStoppedError`` (tickets)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for ticket in self._tickets.values():
            ticket.error = "engine stopped"
            ticket.first_token.set()
            ticket.done.set()
        self._tickets.clear()
        self._step_event.set()  # wake streams waiting for a step that will not come

    # -- requests -------------------------------------------------------------------------------

    def sim_now(self) -> float:
        return (self._clock() - self._t0) * self.speedup

    def footprint_blocks(self, request: EngineRequest) -> int:
        """KV blocks the node reserves for the request (prompt blocks and output tokens)."""
        block = self.profile.block_tokens
        tokens = max(1, request.prompt_tokens) + max(1, request.output_tokens)
        return max(len(request.blocks), -(-tokens // block))

    def submit(self, request: EngineRequest) -> Ticket:
        """Queue a request; raises :class:`RequestTooLargeError` when it can never fit."""
        need = self.footprint_blocks(request)
        if need > self.node.cache.capacity:
            raise RequestTooLargeError(
                f"the request needs {need} KV blocks of {self.profile.block_tokens} tokens "
                f"(prompt + output); this engine has {self.node.cache.capacity}"
            )
        rid = next(self._rids)
        sim_request = SimRequest(
            arrival_s=self.sim_now(),
            key=request.key,
            key_hash=0,
            blocks=request.blocks,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
        )
        job = Job(rid, sim_request)
        ticket = Ticket(job, self._clock())
        self._tickets[rid] = ticket
        self.node.enqueue(job)
        self._wake.set()
        return ticket

    def tokens_out(self, ticket: Ticket) -> int:
        """Output tokens the request has produced so far."""
        if ticket.done.is_set():
            return ticket.output_tokens if ticket.error is None else 0
        if ticket.first_index < 0:
            return 0
        return min(ticket.output_tokens, self.steps - ticket.first_index)

    def step_event(self) -> asyncio.Event:
        """An event set when the current step ends (a new one is handed out after each step)."""
        return self._step_event

    # -- state ----------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self.node.prefilling) + self.node.decoding

    @property
    def waiting(self) -> int:
        return len(self.node.waiting)

    @property
    def kv_usage(self) -> float:
        """Blocks held by running requests (pinned or reserved) over capacity, as vLLM counts:
        cached blocks nobody uses are free (evictable), not used."""
        cache = self.node.cache
        return min(1.0, (cache.pinned + cache.reserved) / cache.capacity)

    def set_slowdown(self, factor: float) -> None:
        """Every later step takes ``factor`` × its modelled time (1: normal)."""
        if not 0 < factor <= MAX_SLOWDOWN:
            raise ValueError(f"slowdown must be within (0, {MAX_SLOWDOWN:g}], got {factor}")
        self.slowdown = factor

    def idle(self) -> bool:
        node = self.node
        return not (node.waiting or node.prefilling or node.decoding)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (a fresh cache); refused (False) while requests are in flight."""
        if not self.idle():
            return False
        self.node = self._new_node()
        self.stats.cache_resets += 1
        if self.kv_events is not None:
            self.kv_events.cleared()
        return True

    # -- the step loop --------------------------------------------------------------------------

    def _new_node(self) -> Node:
        blocks, events = self.profile.kv_blocks, self.kv_events
        cache = new_prefix_cache(blocks) if events is None else events.new_cache(blocks)
        return Node(0, self.profile, cache=cache, on_finish=self._on_finish)

    def _on_finish(self, job: Job, now: float) -> None:
        self._finished.append(job)

    async def _run(self) -> None:
        next_start: float | None = None
        lag_limit = self.max_lag_s
        while True:
            if self.idle():
                next_start = None
                self._wake.clear()
                await self._wake.wait()
            now = self.sim_now()
            if next_start is None:
                start = now
            elif now - next_start > lag_limit:
                start = now  # too far behind the wall clock: resynchronise, that time is lost
                self.stats.resyncs += 1
            else:
                start = next_start
            self.stats.lag_s = max(0.0, now - start) / self.speedup
            node = self.node
            dt = node.start_step(start) * self.slowdown
            if dt <= 0.0:
                next_start = None
                await asyncio.sleep(0)
                continue
            prefilling = list(node.prefilling)
            decoding = node.decoding
            end = start + dt
            delay = (end - self.sim_now()) / self.speedup
            await asyncio.sleep(max(0.0, delay))
            node.end_step(end)
            self._after_step(prefilling, decoding)
            next_start = end

    def _after_step(self, prefilling: list[Job], decoding: int) -> None:
        index = self.steps
        self.steps = index + 1
        wall = self._clock()
        stats = self.stats
        tickets = self._tickets
        firsts = 0
        for job in prefilling:
            if job.first_token < 0.0:
                continue
            ticket = tickets.get(job.rid)
            if ticket is None or ticket.first_index >= 0:
                continue
            firsts += 1
            ticket.first_index = index
            ticket.first_token_wall = wall
            stats.first_token(job.prompt, job.cached, wall - ticket.submitted_wall)
            ticket.first_token.set()
        stats.generation_tokens += decoding + firsts
        for job in self._finished:
            finished = tickets.pop(job.rid, None)
            if finished is not None:
                finished.finished_wall = wall
                stats.requests_finished += 1
                finished.first_token.set()
                finished.done.set()
        self._finished.clear()
        if self.kv_events is not None:
            self.kv_events.after_step(self.node.cache, self.profile.block_tokens)
        event = self._step_event
        self._step_event = asyncio.Event()
        event.set()
