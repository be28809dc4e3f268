"""CacheRoute's shared state: plans, pointer, nodes, loads, ACKs, telemetry, leases, hints.

The interfaces are in :mod:`.interfaces`, the Redis implementation in ``redis_*.py``, the key
schema in :mod:`.schema`, the in-memory twin in :mod:`.memory`. :func:`open_stores` connects them
all to one URL: ``redis://...`` (or ``rediss://``, ``unix://``), or ``memory://NAME``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from cacheroute_state.interfaces import (
    ClusterStore,
    HintSource,
    LeaseStore,
    PlanStore,
    TelemetryStore,
)
from cacheroute_state.memory import (
    SCHEME as MEMORY_SCHEME,
)
from cacheroute_state.memory import (
    MemoryClusterStore,
    MemoryHintSource,
    MemoryLeaseStore,
    MemoryPlanStore,
    MemoryTelemetryStore,
    memory_state,
)
from cacheroute_state.redis_base import connect
from cacheroute_state.redis_cluster_store import (
    RedisClusterStore,
    RedisLeaseStore,
    RedisTelemetryStore,
)
from cacheroute_state.redis_hints import RedisHintSource
from cacheroute_state.redis_plans import RedisPlanStore
from cacheroute_state.redis_table_fetch import ChunkedTableFetcher

TableFetch = Callable[[str, str], Awaitable[bytes | memoryview | None]]


@dataclass(frozen=True)
class Stores:
    plans: PlanStore
    cluster: ClusterStore
    telemetry: TelemetryStore
    leases: LeaseStore
    hints: HintSource
    # The plan store's read for a serving loop: on Redis in slices, so a big table does not
    # stall the loop (:mod:`.redis_table_fetch`); in memory the plain read.
    fetch_table: TableFetch
    client: aioredis.Redis | None = None  # the Redis connection pool; None in memory

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()


def open_stores(url: str) -> Stores:
    """All stores on one Redis connection pool (no I/O until first use), or on the in-memory
    state named by ``memory://NAME`` (shared by everything in this process that opens it)."""
    if url.startswith(MEMORY_SCHEME):
        state = memory_state(url)
        plans = MemoryPlanStore(state)
        return Stores(
            plans=plans,
            cluster=MemoryClusterStore(state),
            telemetry=MemoryTelemetryStore(state),
            leases=MemoryLeaseStore(state),
            hints=MemoryHintSource(state),
            fetch_table=plans.get_table_bytes,
        )
    client = connect(url)
    return Stores(
        plans=RedisPlanStore(client),
        cluster=RedisClusterStore(client),
        telemetry=RedisTelemetryStore(client),
        leases=RedisLeaseStore(client),
        hints=RedisHintSource(client),
        fetch_table=ChunkedTableFetcher(client),
        client=client,
    )
