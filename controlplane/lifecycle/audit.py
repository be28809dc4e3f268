"""ListAudit: the audit trail read back, filtered by pool, actor, action and time.

Every write of the control plane appends an ``AuditEvent`` to its pool's trail (the store keeps
the last ``AUDIT_MAXLEN`` = 10,000 per pool): imports and builds, pointer moves with the skipped
gates and the reason, shadow verdicts, node changes, automatic mode, the live guard. This reads
the trails of one pool or all, keeps the events that match every given filter, and answers the
newest ``limit`` first (``cachectl audit``).
"""

from __future__ import annotations

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.schema import AUDIT_MAXLEN
from controlplane.errors import InvalidArgumentError
from dataplane.core.names import validate_pool

DEFAULT_LIMIT = 100


def matches(event: cluster_pb2.AuditEvent, request: admin_pb2.ListAuditRequest) -> bool:
    return (
        (not request.actor or event.actor == request.actor)
        and (not request.action or event.action == request.action)
        and (not request.since_unix_ms or event.at_unix_ms >= request.since_unix_ms)
        and (not request.until_unix_ms or event.at_unix_ms < request.until_unix_ms)
    )


async def list_audit(
    stores: Stores, request: admin_pb2.ListAuditRequest
) -> admin_pb2.ListAuditResponse:
    if request.limit > AUDIT_MAXLEN:
        raise InvalidArgumentError(
            f"limit: at most {AUDIT_MAXLEN} (a pool's trail keeps that many)"
        )
    pools = [validate_pool(request.pool)] if request.pool else await stores.plans.pools()
    found: list[cluster_pb2.AuditEvent] = []
    for pool in pools:
        found.extend(
            e for e in await stores.plans.read_audit(pool, AUDIT_MAXLEN) if matches(e, request)
        )
    found.sort(key=lambda e: -e.at_unix_ms)  # stable: same-time events keep their trail order
    return admin_pb2.ListAuditResponse(events=found[: request.limit or DEFAULT_LIMIT])
