"""The in-memory twin of every state interface, for tests and single-process embedding.

The twin keeps the Redis implementation's contract (``tests/state/`` runs one suite against
both): the same records, the pointer's compare-and-set and history, report ownership, stream
cursors, lease expiry and hints, including the ``resync`` that opens every subscription. It has
no persistence and no cross-process visibility: its state lives in this process only.

``open_stores("memory://NAME")`` (:func:`cacheroute_state.open_stores`) opens stores on the named
state, so every component given that URL in one process shares it, as processes share one Redis.
:func:`memory_state` returns the state itself, to inject an outage
(:meth:`~.state.MemoryState.go_away`) or a clock; :func:`forget` drops it.
"""

from __future__ import annotations

from cacheroute_state.memory.cluster import (
    MemoryClusterStore,
    MemoryLeaseStore,
    MemoryTelemetryStore,
)
from cacheroute_state.memory.hints import MemoryHintSource
from cacheroute_state.memory.plans import MemoryPlanStore
from cacheroute_state.memory.state import MemoryState

SCHEME = "memory://"
_STATES: dict[str, MemoryState] = {}

__all__ = [
    "SCHEME",
    "MemoryClusterStore",
    "MemoryHintSource",
    "MemoryLeaseStore",
    "MemoryPlanStore",
    "MemoryState",
    "MemoryTelemetryStore",
    "forget",
    "memory_state",
]


def memory_state(url: str) -> MemoryState:
    """The state named by ``memory://NAME``, created on first use."""
    if not url.startswith(SCHEME):
        raise ValueError(f"not an in-memory store URL (memory://NAME): {url!r}")
    name = url[len(SCHEME) :]
    state = _STATES.get(name)
    if state is None:
        state = _STATES[name] = MemoryState()
    return state


def forget(url: str) -> None:
    """Drop the named state (the next open starts empty)."""
    _STATES.pop(url[len(SCHEME) :], None)
