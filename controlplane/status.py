"""GetStatus: the active pointer, router ACK/NACKs and node states per pool, and the leader."""

from __future__ import annotations

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.config import LEADER_LEASE
from controlplane.nodes import Liveness, list_statuses
from dataplane.core.names import validate_pool


async def pool_status(
    stores: Stores, pool: str, now_ms: int, liveness: Liveness
) -> admin_pb2.PoolStatus:
    status = admin_pb2.PoolStatus(pool=pool)
    active = await stores.plans.get_active(pool)
    if active is not None:
        status.active.CopyFrom(active)
    status.routers.extend(await stores.cluster.get_acks(pool))
    status.nodes.extend(await list_statuses(stores, pool, now_ms, liveness))
    return status


async def cluster_status(
    stores: Stores, pool: str, *, now_ms: int, liveness: Liveness, instance_id: str
) -> admin_pb2.ClusterStatus:
    """Every pool (or just ``pool``); router ages are for the client to compute from at_unix_ms."""
    pools = [validate_pool(pool)] if pool else await stores.plans.pools()
    leader = await stores.leases.holder(LEADER_LEASE) or ""
    return admin_pb2.ClusterStatus(
        pools=[await pool_status(stores, p, now_ms, liveness) for p in pools],
        leader_id=leader,
        is_leader=leader == instance_id,
    )
