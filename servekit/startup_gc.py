"""The cyclic garbage collector around a server's start-up: paused while it starts, then the
start-up's objects frozen out of every later collection.

A server's start-up creates a few hundred thousand objects that live as long as the process:
modules, protobuf descriptors, gRPC, aiohttp and structlog machinery, the first tables. CPython
runs a collection every 700 net allocations and a full one whenever the long-lived objects grew
by a quarter, and each full collection walks all of them again: during start-up and then every
few seconds of traffic, for objects that never become garbage. Measured with perf over the whole
test suite, about 15 s of CPU went to collections in the suite's few hundred short-lived server
processes (docs/DEVELOPING.md, "Seventh round").

:func:`pause_for_startup` runs first thing in a server's ``__main__`` (only when run as a
program, so a test importing the module keeps its own collector); :func:`freeze_startup` runs once
the server serves: everything allocated so far moves to the permanent generation
(:func:`gc.freeze`) and the collector is back on for what traffic allocates. Start-up builds no
reference cycles worth reclaiming before the freeze; a start-up that fails exits the process.
"""

from __future__ import annotations

import gc


class _State:
    paused = False


def pause_for_startup() -> None:
    """Stop the cyclic collector until :func:`freeze_startup` (module docstring)."""
    if gc.isenabled():
        gc.disable()
        _State.paused = True


def freeze_startup() -> None:
    """Move every object allocated so far out of the collector's reach (:func:`gc.freeze`), and
    turn the collector back on if :func:`pause_for_startup` turned it off."""
    gc.freeze()
    if _State.paused:
        _State.paused = False
        gc.enable()
