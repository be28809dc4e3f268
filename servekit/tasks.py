"""Stopping a server's background tasks, including the ones whose cancellation got lost.

On Python 3.11 ``asyncio.wait_for`` returns the inner result and drops the cancellation when
both arrive in the same loop turn (CPython gh-86296, fixed in 3.12), and redis-py sends every
command through ``wait_for(..., socket_timeout)``. A router stopped while its hint subscription
was subscribing kept that task alive, listening; the router's stop gave up after its grace and
the process's event loop then waited for the task forever at exit (a test's teardown hung for
the 900 s guard in one suite run on a loaded machine). So a task still running after a short wait
is cancelled again, until it ends or the time is up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

import structlog

log = structlog.get_logger("servekit.tasks")
RECANCEL_S = 0.2


async def cancel_all(
    tasks: Collection[asyncio.Task[None]], timeout_s: float | None = None
) -> set[asyncio.Task[None]]:
    """Cancel ``tasks`` and wait for them, cancelling again any that swallowed the request; log
    the ones that failed. Returns those still running after ``timeout_s`` (None: wait for all)."""
    for task in tasks:
        task.cancel()
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    pending = set(tasks)
    while pending:
        wait_s = RECANCEL_S if deadline is None else min(RECANCEL_S, deadline - loop.time())
        if wait_s <= 0:
            break
        done, pending = await asyncio.wait(pending, timeout=wait_s)
        for task in pending:
            log.info("task ignored its cancellation; cancelling again", task=task.get_name())
            task.cancel()
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("task failed", task=task.get_name(), error=repr(task.exception()))
    return pending
