"""What crosses between the HTTP side and the engine: a request, its ticket, and their errors.

:mod:`simengine.api` builds :class:`EngineRequest` and waits on :class:`Ticket` events without
needing the step loop of :mod:`simengine.realtime_engine`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sim.node import Job


class RequestTooLargeError(ValueError):
    """A request whose KV footprint (prompt + output blocks) exceeds the whole cache."""


class EngineStoppedError(RuntimeError):
    """The engine stopped before the request finished."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """What the engine model needs of a request: its prompt blocks and token counts."""

    blocks: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    key: str = ""


class Ticket:
    """One submitted request: events for its first and last token, and the wall times."""

    __slots__ = (
        "done",
        "error",
        "finished_wall",
        "first_index",
        "first_token",
        "first_token_wall",
        "job",
        "submitted_wall",
    )

    def __init__(self, job: Job, submitted_wall: float) -> None:
        self.job = job
        self.submitted_wall = submitted_wall
        self.first_token = asyncio.Event()
        self.done = asyncio.Event()
        self.first_index = -1  # engine step index that produced the first token
        self.first_token_wall = -1.0
        self.finished_wall = -1.0
        self.error: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.job.prompt

    @property
    def output_tokens(self) -> int:
        return self.job.output

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache (decided when the request was admitted)."""
        return self.job.cached
