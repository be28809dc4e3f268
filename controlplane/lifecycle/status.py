"""GetStatus: the active pointer, router ACK/NACKs and node states per pool, and the leader.

Routers: every router writes its ACK per pool at its first sync and again every
``--ack-interval`` (5 s) as a heartbeat (:mod:`dataplane.sync.table_watcher`); before it has applied
any plan its record has generation 0 (``cachectl status`` shows it as ``starting``, or ``no
plan`` when the pool has none). A router silent for ``ROUTER_EXPIRY_MS`` (5 minutes: 60 missed
heartbeats) is gone: it is left out of ``routers`` and counted in ``routers_expired``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from cacheroute_state.active_pointer import active_or_damage
from controlplane.cluster.leader import LEADER_LEASE
from controlplane.cluster.nodes import Liveness, list_statuses
from controlplane.core.ttft_window import WindowQuantile
from controlplane.lifecycle.rollout_gates import PlanNodes, check_destinations
from dataplane.core.names import validate_pool
from dataplane.core.table import TableError
from dataplane.core.table_codec import decode_table

# The pool's p99 TTFT over the guard's window, as this instance knows it (the leader feeds it).
TtftOf = Callable[[str, int], WindowQuantile]

# Versions are content-addressed, so a plan's destinations never change: decode each once.
_PLAN_NODES: OrderedDict[tuple[str, str], PlanNodes] = OrderedDict()
PLAN_NODES_KEPT = 16


async def plan_nodes(stores: Stores, pool: str, version: str) -> PlanNodes | None:
    cached = _PLAN_NODES.get((pool, version))
    if cached is not None:
        return cached
    data = await stores.plans.get_table_bytes(pool, version)
    if data is None:
        return None
    try:
        table = await asyncio.to_thread(decode_table, data, verify_hash=False)
    except TableError:  # a corrupt stored table: the routers' NACKs say so; status still answers
        return None
    nodes = _PLAN_NODES[(pool, version)] = PlanNodes.of(table)
    while len(_PLAN_NODES) > PLAN_NODES_KEPT:
        _PLAN_NODES.popitem(last=False)
    return nodes


LAST_VERDICTS = 5
ROUTER_EXPIRY_MS = 5 * 60_000


async def pool_status(
    stores: Stores, pool: str, now_ms: int, liveness: Liveness, ttft_of: TtftOf | None = None
) -> admin_pb2.PoolStatus:
    status = admin_pb2.PoolStatus(pool=pool)
    # The guard and the automatic mode are read before the pointer: the live guard moves the
    # pointer first and records its decision after, so a decision seen here is never newer
    # than the pointer shown with it.
    guard = await stores.plans.get_guard(pool)
    mode = await stores.plans.get_auto_mode(pool)
    active = await active_or_damage(stores.plans, pool)  # a damaged record shown as such
    if active is not None:
        status.active.CopyFrom(active)
        nodes = await plan_nodes(stores, pool, active.version) if active.version else None
        if nodes is not None:
            found = await check_destinations(stores, nodes, now_ms, liveness)
            status.active_destinations.CopyFrom(found)
        meta = await stores.plans.get_metadata(pool, active.version) if active.version else None
        if meta is not None and meta.verdict.decided_at_unix_ms:
            status.active_verdict.CopyFrom(meta.verdict)
    decided = [m for m in await stores.plans.list_plans(pool, 50) if m.verdict.decided_at_unix_ms]
    decided.sort(key=lambda m: -m.verdict.decided_at_unix_ms)
    for meta in decided[:LAST_VERDICTS]:
        status.last_verdicts.append(
            admin_pb2.VersionVerdict(version=meta.version, verdict=meta.verdict)
        )
    if mode is not None:
        status.auto_mode.CopyFrom(mode)
    if guard is not None:
        status.guard.CopyFrom(guard)
    if ttft_of is not None:
        p99 = ttft_of(pool, now_ms)
        status.ttft_samples = p99.samples
        status.ttft_source = p99.source
        if p99.value_s is not None:
            status.p99_ttft_s = p99.value_s
    for ack in await stores.cluster.get_acks(pool):
        if ack.at_unix_ms and ack.at_unix_ms < now_ms - ROUTER_EXPIRY_MS:
            status.routers_expired += 1
        else:
            status.routers.append(ack)
    status.nodes.extend(await list_statuses(stores, pool, now_ms, liveness))
    return status


async def cluster_status(
    stores: Stores,
    pool: str,
    *,
    now_ms: int,
    liveness: Liveness,
    instance_id: str,
    store: str = "",
    ttft_of: TtftOf | None = None,
) -> admin_pb2.ClusterStatus:
    """Every pool (or just ``pool``); router ages are for the client to compute from at_unix_ms."""
    pools = [validate_pool(pool)] if pool else await stores.plans.pools()
    leader = await stores.leases.holder(LEADER_LEASE) or ""
    return admin_pb2.ClusterStatus(
        pools=[await pool_status(stores, p, now_ms, liveness, ttft_of) for p in pools],
        leader_id=leader,
        is_leader=leader == instance_id,
        store=store,
    )
