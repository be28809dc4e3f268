"""Hints: pub/sub nudges that tell a reader what to re-read, and the source that pushes them.

A hint carries no state of its own (a missed hint costs a re-read, never a wrong answer), so it
is a separate concept from the stores whose records it points at.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum


class HintKind(StrEnum):
    """What a hint says to re-read; the value is the channel suffix on Redis."""

    TABLE = "table"  # payload: the new generation
    LOAD = "load"  # payload: the LoadSnapshot
    POOLS = "pools"  # payload: the new pool
    # The first hint of every subscription: re-read everything, since hints published before it
    # were missed.
    RESYNC = "resync"


@dataclass(frozen=True)
class Hint:
    """A pub/sub nudge: re-read something (:class:`HintKind` says what)."""

    kind: HintKind
    pool: str
    payload: bytes


class HintSource(ABC):
    """Pushes hints for the given pools (and pool additions) until the iterator is closed."""

    @abstractmethod
    def subscribe(self, pools: Sequence[str] | None) -> AsyncIterator[Hint]:
        """Hints for ``pools`` (all pools when None)."""
