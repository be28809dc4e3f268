"""A short GIL switch interval only while a worker thread runs Python code.

CPython lets a thread that holds the GIL keep it for the switch interval (5 ms by default) before
another thread that waits gets it. A router's serving thread must not wait that long behind a
table decode or a metrics scrape, so those run inside :func:`fast_switching` (0.5 ms). Outside
them the default stays: a process-wide 0.5 ms made the serving thread hand the GIL back and forth
with gRPC's poller thread ten times as often, which cost CPU on every request under load
(docs/benchmarks.md, "Route CPU per request").
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

FAST_SWITCH_INTERVAL_S = 0.0005
T = TypeVar("T")


class _Shared:
    """How many threads are inside :func:`fast_switching`, and the interval to restore."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.saved = sys.getswitchinterval()


_SHARED = _Shared()


@contextmanager
def fast_switching(interval_s: float = FAST_SWITCH_INTERVAL_S) -> Iterator[None]:
    """Run the body with the switch interval at ``interval_s``; nested and concurrent uses
    (from any thread) share it, and the interval in force before the first comes back after
    the last."""
    shared = _SHARED
    with shared.lock:
        if shared.inside == 0:
            shared.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(interval_s, shared.saved))
        shared.inside += 1
    try:
        yield
    finally:
        with shared.lock:
            shared.inside -= 1
            if shared.inside == 0:
                sys.setswitchinterval(shared.saved)


def fast_switched(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` inside :func:`fast_switching`: what a worker thread runs (``to_thread``)."""
    with fast_switching():
        return fn(*args)
