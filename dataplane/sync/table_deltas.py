"""The delta path of the table watcher: what changed since the version a router holds.

When the control plane stored a delta from the version this router serves to the one the pointer
names (:mod:`controlplane.lifecycle.deltas`), the watcher reads that (a few percent of the table
for a churn-aware replan) instead of the whole table, and applies it on its worker thread. The
result is the exact target or a :class:`~dataplane.core.table.TableError` (the content hash is
verified), after which the watcher fetches the whole table as before: a router that missed
versions, or holds a base no delta was stored for, still converges to the exact table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from cacheroute_state.interfaces import PlanStore
from dataplane.core.protobuf_fields import Buffer
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_delta import apply_delta
from dataplane.core.table_delta_codec import decode_delta
from dataplane.telemetry.router_metrics import RouterMetrics

log = structlog.get_logger("dataplane.sync.table_watcher")
OffLoop = Callable[..., Awaitable[Any]]


def apply_owned(box: list[Buffer], held: RoutingTable, pool: str, version: str) -> RoutingTable:
    """``held`` plus the delta in ``box`` (emptied, so its bytes are freed on the worker thread),
    checked to be ``pool``'s table ``version`` (run in a worker thread)."""
    delta = decode_delta(box.pop())
    if delta.target.pool != pool or delta.target.version != version:
        raise TableError(
            f"delta leads to {delta.target.pool}/{delta.target.version}, the pointer names "
            f"{pool}/{version}"
        )
    return apply_delta(held, delta)


async def from_delta(
    plans: PlanStore,
    metrics: RouterMetrics,
    off_loop: OffLoop,
    pool: str,
    held: RoutingTable | None,
    version: str,
) -> RoutingTable | None:
    """The table ``version`` from a stored delta against ``held``, applied by ``off_loop`` (the
    watcher's worker thread); None: no such delta, or it did not apply (logged, counted)."""
    if held is None or held.version == version:
        return None
    data = await plans.get_delta_bytes(pool, held.version, version)
    if data is None:
        return None
    try:
        table: RoutingTable = await off_loop(apply_owned, [data], held, pool, version)
    except TableError as exc:
        metrics.table_fetched(pool, "delta_rejected", len(data))
        log.warning("table delta rejected; fetching the whole table", pool=pool,
                    base=held.version, version=version, reason=str(exc))  # fmt: skip
        return None
    metrics.table_fetched(pool, "delta", len(data))
    return table
