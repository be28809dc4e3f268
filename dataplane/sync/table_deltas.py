"""The delta path of the table watcher: what changed since the version a router holds.

When the control plane stored a delta from the version this router serves to the one the pointer
names (:mod:`controlplane.lifecycle.deltas`), the watcher reads that (a few percent of the table
for a churn-aware replan) instead of the whole table, and applies it on its worker thread. The
result is the exact target or a :class:`~dataplane.core.table.TableError` (the content hash is
verified), after which the watcher fetches the whole table as before: a router that missed
versions, or holds a base no delta was stored for, still converges to the exact table.
"""

from __future__ import annotations

from dataplane.core.protobuf_fields import Buffer
from dataplane.core.table import RoutingTable, TableError
from dataplane.core.table_delta import apply_delta
from dataplane.core.table_delta_codec import decode_delta


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
