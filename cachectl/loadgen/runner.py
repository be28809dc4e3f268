"""Open-loop replay: every request starts at its arrival time, whatever the cluster's state.

A workload stream of ``warmup_s + duration_s`` seconds is replayed from now: request *i* starts
at ``t0 + arrival_i`` in its own task (an open loop never waits for answers, so a slow cluster
shows as queueing, not as a lower offered load). Requests arriving before ``warmup_s`` warm the
caches and the load snapshots and are left out of the metrics. When the last request has
started, the run waits up to ``drain_timeout_s`` for those in flight; stragglers are cancelled
and counted as ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Protocol

from cachectl.loadgen.progress import ProgressLine
from cachectl.loadgen.results import Outcome
from sim.types import SimRequest


class Sender(Protocol):
    """Sends one request and fills its outcome (``LoadClient``, ``OpenAILoadClient``)."""

    async def run(self, request: SimRequest, outcome: Outcome) -> None: ...


PROGRESS_INTERVAL_S = 0.5
START_LEAD_S = 0.05


async def replay(
    client: Sender,
    requests: Sequence[SimRequest],
    *,
    warmup_s: float = 0.0,
    drain_timeout_s: float = 60.0,
    progress: ProgressLine | None = None,
) -> list[Outcome]:
    """Replay ``requests`` (arrival times from 0) through ``client``; one outcome per request."""
    outcomes: list[Outcome] = []
    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    t0 = started + START_LEAD_S
    ticker = (
        asyncio.create_task(_tick(progress, outcomes, started)) if progress is not None else None
    )
    try:
        for index, request in enumerate(requests):
            due = t0 + request.arrival_s
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            outcome = Outcome(index, request.key, request.arrival_s >= warmup_s, due)
            outcomes.append(outcome)
            task = asyncio.create_task(client.run(request, outcome))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=drain_timeout_s)
    finally:
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            assert progress is not None
            progress.finish(outcomes, started)
    return outcomes


async def _tick(progress: ProgressLine, outcomes: list[Outcome], started: float) -> None:
    while True:
        progress.show(outcomes, started)
        await asyncio.sleep(PROGRESS_INTERVAL_S)
