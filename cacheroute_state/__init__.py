"""CacheRoute's shared state: plans, pointer, nodes, loads, ACKs, telemetry, leases, hints.

The interfaces are in :mod:`.base`, the Redis implementation in ``redis_*.py``, the key schema in
:mod:`.schema`. :func:`open_stores` connects them all to one Redis URL.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from cacheroute_state.interfaces import (
    ClusterStore,
    HintSource,
    LeaseStore,
    PlanStore,
    TelemetryStore,
)
from cacheroute_state.redis_base import connect
from cacheroute_state.redis_cluster_store import (
    RedisClusterStore,
    RedisLeaseStore,
    RedisTelemetryStore,
)
from cacheroute_state.redis_hints import RedisHintSource
from cacheroute_state.redis_plans import RedisPlanStore


@dataclass(frozen=True)
class Stores:
    plans: PlanStore
    cluster: ClusterStore
    telemetry: TelemetryStore
    leases: LeaseStore
    hints: HintSource
    client: aioredis.Redis

    async def close(self) -> None:
        await self.client.aclose()


def open_stores(redis_url: str) -> Stores:
    """All stores on one Redis connection pool (no I/O until first use)."""
    client = connect(redis_url)
    return Stores(
        plans=RedisPlanStore(client),
        cluster=RedisClusterStore(client),
        telemetry=RedisTelemetryStore(client),
        leases=RedisLeaseStore(client),
        hints=RedisHintSource(client),
        client=client,
    )
