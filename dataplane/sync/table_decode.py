"""Decoding a fetched table off the serving thread: one worker thread at a lower OS priority.

Apart from the table loop (:mod:`dataplane.sync.table_watcher`) because it is about threads, not
the store: ``table_codec.decode_table`` keeps the GIL free for the big arrays, so a decode on this
thread lets the event loop keep deciding, and the replaced table's arrays are freed here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from dataplane.core.protobuf_fields import Buffer
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_codec import decode_table
from servekit.gil import fast_switched

T = TypeVar("T")


def decode_owned(box: list[Buffer], pool: str, version: str) -> RoutingTable:
    """:func:`decode_for` on the buffer in ``box``, which it empties: the fetched bytes are then
    freed on the worker thread, not on the serving thread."""
    return decode_for(box.pop(), pool, version)


def decode_for(data: Buffer, pool: str, version: str) -> RoutingTable:
    """Decode and validate ``data`` as the table the pointer names (run in a worker thread)."""
    table = decode_table(data)
    if table.pool != pool:
        raise TableError(f"table is for pool {table.pool!r}, not {pool!r}")
    if table.version != version:
        raise TableError(f"stored bytes hold version {table.version}, the pointer names {version}")
    return table


def lower_priority(nice: int) -> None:
    """Run the decode thread at a lower OS priority (Linux: per-thread nice), so that on a busy
    machine the serving thread gets the CPU first and a swap only uses what is left."""
    if nice > 0:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


class DecodeThread:
    """The worker thread decodes and frees run on (``nice`` > 0: at that lower priority)."""

    def __init__(self, nice: int = 0) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="table-decode", initializer=lower_priority,
            initargs=(nice,),
        )  # fmt: skip

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, fast_switched, fn, *args
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
