"""Stored plans behind PlanService: import, list and show immutable plan versions.

Plans are immutable versions in the store; importing content that is already stored is not a
write, and every import is audited with its actor. Moving the active pointer between them
(rollout, rollback, disable, through the gates) is :mod:`controlplane.lifecycle.pointer_moves`.
"""

from __future__ import annotations

import asyncio

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from cacheroute_state.active_pointer import active_or_damage
from cacheroute_state.interfaces import PlanNotFoundError
from controlplane.cluster.nodes import Liveness
from controlplane.errors import InvalidArgumentError
from controlplane.lifecycle.rollout_gates import (
    check_destinations,
)
from dataplane.core.names import validate_pool, validate_version
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import (
    decode_table,
    params_to_proto,
    stats_to_proto,
    table_from_proto,
)

DEFAULT_LIST_LIMIT = 50
DEFAULT_TOP_KEYS = 10


def metadata_for(
    table: RoutingTable, *, created_by: str, source: str, note: str, table_bytes: int, now_ms: int
) -> table_pb2.PlanMetadata:
    return table_pb2.PlanMetadata(
        pool=table.pool,
        version=table.version,
        content_hash=table.content_hash,
        created_at_unix_ms=now_ms,
        created_by=created_by,
        source=source,
        params=params_to_proto(table.params),
        stats=stats_to_proto(table.stats),
        note=note,
        table_bytes=table_bytes,
    )


async def summary(stores: Stores, meta: table_pb2.PlanMetadata) -> admin_pb2.PlanSummary:
    active = await active_or_damage(stores.plans, meta.pool)
    return admin_pb2.PlanSummary(
        metadata=meta, active=active is not None and active.version == meta.version
    )


async def store_plan(
    stores: Stores, table_bytes: bytes, meta: table_pb2.PlanMetadata, *, action: str
) -> admin_pb2.PlanSummary:
    """Store a validated plan once; audit ``action`` only when it was new."""
    stored, created = await stores.plans.put_plan(table_bytes, meta)
    if created:
        await stores.plans.append_audit(
            cluster_pb2.AuditEvent(
                at_unix_ms=meta.created_at_unix_ms,
                actor=meta.created_by,
                action=action,
                pool=meta.pool,
                to_version=meta.version,
                detail=meta.note,
            )
        )
    return await summary(stores, stored)


async def import_plan(
    stores: Stores,
    msg: table_pb2.RoutingTable,
    *,
    actor: str,
    note: str,
    now_ms: int,
    liveness: Liveness | None = None,
) -> admin_pb2.PlanSummary:
    """Validate a table built elsewhere (by decoding it, hash included) and store it; with
    ``liveness``, the answer says how its destinations match the pool's nodes."""
    if msg.ByteSize() == 0:
        raise InvalidArgumentError("the request has no table")
    table = await asyncio.to_thread(table_from_proto, msg)
    validate_pool(table.pool)
    data = msg.SerializeToString()
    meta = metadata_for(
        table, created_by=actor, source="import", note=note, table_bytes=len(data), now_ms=now_ms
    )
    stored = await store_plan(stores, data, meta, action="import")
    if liveness is not None:
        stored.destinations.CopyFrom(await check_destinations(stores, table, now_ms, liveness))
    return stored


async def list_plans(stores: Stores, pool: str, limit: int) -> admin_pb2.ListPlansResponse:
    pool = validate_pool(pool)
    metas = await stores.plans.list_plans(pool, limit or DEFAULT_LIST_LIMIT)
    active = await active_or_damage(stores.plans, pool)
    active_version = active.version if active is not None else None
    response = admin_pb2.ListPlansResponse(
        plans=[admin_pb2.PlanSummary(metadata=m, active=m.version == active_version) for m in metas]
    )
    if active is not None:
        response.active.CopyFrom(active)
    return response


async def read_plan(
    stores: Stores, pool: str, version: str
) -> tuple[table_pb2.PlanMetadata, bytes]:
    pool = validate_pool(pool)
    validate_version(version)
    meta = await stores.plans.get_metadata(pool, version)
    data = await stores.plans.get_table_bytes(pool, version)
    if meta is None or data is None:
        raise PlanNotFoundError(
            f"plan {version} not found in pool {pool} (`cachectl plan list` shows the stored ones)"
        )
    return meta, data


async def get_plan(
    stores: Stores,
    pool: str,
    version: str,
    *,
    top_keys: int,
    include_table: bool,
    now_ms: int = 0,
    liveness: Liveness | None = None,
) -> admin_pb2.GetPlanResponse:
    """A plan's metadata, its highest-rate keys with their destinations, optionally the table;
    with ``liveness``, how its destinations match the pool's nodes."""
    meta, data = await read_plan(stores, pool, version)
    table = await asyncio.to_thread(decode_table, data, verify_hash=False)
    response = admin_pb2.GetPlanResponse(summary=await summary(stores, meta))
    if liveness is not None:
        found = await check_destinations(stores, table, now_ms, liveness)
        response.summary.destinations.CopyFrom(found)
    for label in table.top_keys[: top_keys or DEFAULT_TOP_KEYS]:
        response.top_keys.append(
            admin_pb2.KeyAssignment(
                key_hash=label.key_hash,
                key=label.key,
                rate=label.rate,
                node_ids=table.destination_ids(label.key_hash) or [],
            )
        )
    if include_table:
        response.table.ParseFromString(data)
    return response
