"""Reads a plan's table bytes from Redis in slices, so a big table never stalls the serving loop.

``PlanStore.get_table_bytes`` reads a value with one GET. For a 1M-key table (~14 MB) redis-py's
asyncio parser then buffers and copies the whole value three times on the event loop thread, which
is the thread that answers ``Route``: measured, that blocks decisions for 10-15 ms per swap. This
fetcher reads the same immutable key with ``GETRANGE`` in :data:`CHUNK_BYTES` slices into one
preallocated buffer, so each step on the loop copies one megabyte (~0.1-0.3 ms). A short pause
between slices (:data:`PAUSE_S`) spreads the transfer's CPU (Redis, the kernel, the parser) over
~30 ms more instead of one burst that, on a busy machine, takes the CPU from the requests served.

Plans are immutable (written once, never rewritten), so slices of one key cannot tear; should the
value change anyway (a flushed and refilled Redis), the length check below or the content hash
check of the decoder notices. Small values take the single GET.
"""

from __future__ import annotations

import asyncio

import numpy as np
import redis.asyncio as aioredis

from cacheroute_state import schema
from cacheroute_state.interfaces import StoreUnavailableError
from cacheroute_state.redis_base import blob, unavailable_on_redis_error

CHUNK_BYTES = 1024 * 1024
PAUSE_S = 0.002


class ChunkedTableFetcher:
    """``await fetcher(pool, version)`` → the table bytes, or None when the plan has none."""

    def __init__(
        self, client: aioredis.Redis, chunk_bytes: int = CHUNK_BYTES, pause_s: float = PAUSE_S
    ) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self._redis = client
        self.chunk_bytes = chunk_bytes
        self.pause_s = pause_s

    @unavailable_on_redis_error
    async def __call__(self, pool: str, version: str) -> bytes | memoryview | None:
        key = schema.plan_key(pool, version)
        size = int(await self._redis.strlen(key))
        if size <= self.chunk_bytes:
            data = await self._redis.get(key)
            return None if data is None else blob(data)
        # np.empty, not bytearray(size): bytearray zero-fills, i.e. touches 14 MB of fresh pages
        # in one go on the serving thread (~5-10 ms); these pages are touched a slice at a time.
        buffer = np.empty(size, dtype=np.uint8).data
        step = self.chunk_bytes
        for start in range(0, size, step):
            end = min(size, start + step)
            part = blob(await self._redis.getrange(key, start, end - 1))
            if len(part) != end - start:
                raise StoreUnavailableError(f"plan {version} changed size while being read")
            buffer[start:end] = part
            if self.pause_s and end < size:
                await asyncio.sleep(self.pause_s)
        return buffer
