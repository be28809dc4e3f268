"""Before a pointer move, store the target table as deltas against what routers likely hold.

A router holding version B fetches ``cr:{pool}:deltas:<target>`` field B instead of the whole
target when it is there (:mod:`dataplane.sync.table_watcher`). Routers hold the active version,
or, if they missed the last move, the one before it; so the deltas stored are from those two
(:data:`DELTA_BASES`). A delta larger than :data:`MAX_DELTA_SHARE` of the whole table is not
worth its second read path and is skipped, as is a base that no longer decodes: routers then
fetch the whole table, as before. Computing them costs the control plane a decode per table and
a diff (~1 s of a worker thread per base at 1M keys) per rollout, never the serving loop.
"""

from __future__ import annotations

import asyncio

import structlog

from cacheroute_state import Stores
from cacheroute_state.active_pointer import active_or_damage
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_codec import decode_table
from dataplane.core.table_delta import diff_tables
from dataplane.core.table_delta_codec import encode_delta

log = structlog.get_logger("controlplane.lifecycle.deltas")
DELTA_BASES = 2
MAX_DELTA_SHARE = 0.5


async def delta_bases(stores: Stores, pool: str, version: str) -> list[str]:
    """The active version and the newest previous one, other than ``version``."""
    pointer = await active_or_damage(stores.plans, pool)
    candidates = [pointer.version] if pointer is not None and pointer.version else []
    candidates += await stores.plans.previous_versions(pool, DELTA_BASES)
    bases: list[str] = []
    for base in candidates:
        if base and base != version and base not in bases:
            bases.append(base)
    return bases[:DELTA_BASES]


def _delta(base_bytes: bytes, target: RoutingTable, full_size: int) -> bytes | None:
    base = decode_table(base_bytes, verify_hash=False)
    data = encode_delta(diff_tables(base, target))
    return data if len(data) <= MAX_DELTA_SHARE * full_size else None


async def store_deltas(stores: Stores, pool: str, version: str) -> list[str]:
    """Store the deltas to ``version`` (module docstring); returns the bases stored."""
    bases = await delta_bases(stores, pool, version)
    if not bases:
        return []
    target_bytes = await stores.plans.get_table_bytes(pool, version)
    if target_bytes is None:
        return []
    try:
        target = await asyncio.to_thread(decode_table, target_bytes, verify_hash=False)
    except TableError:  # routers will NACK it; the move is the gates' call, not this one's
        return []
    stored = []
    for base in bases:
        if await stores.plans.get_delta_bytes(pool, base, version) is not None:
            stored.append(base)  # an earlier move between the same versions stored it
            continue
        base_bytes = await stores.plans.get_table_bytes(pool, base)
        if base_bytes is None:
            continue
        try:
            data = await asyncio.to_thread(_delta, base_bytes, target, len(target_bytes))
        except TableError as exc:
            log.warning("no delta: the base does not decode", pool=pool, base=base, error=str(exc))
            continue
        if data is None:
            continue
        await stores.plans.put_delta(pool, base, version, data)
        stored.append(base)
    if stored:
        log.info("table deltas stored", pool=pool, version=version, bases=stored)
    return stored
