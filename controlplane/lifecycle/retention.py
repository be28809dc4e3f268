"""Plan retention: keep the newest N versions and anything still in use; delete the rest.

Every build stores a new immutable version, so without retention the store only grows. A prune
of a pool keeps

* the newest ``keep`` versions (by creation time),
* the active version and the rollback target (the newest earlier active version other than it):
  the store refuses to delete those two in the same atomic step as the delete
  (``PlanStore.delete_plan``), so a concurrent rollout cannot race a prune;
* the versions the live guard watches or would roll back to (``GuardState``),

and deletes every other stored version, auditing one ``prune`` event with the list. ``cachectl
plan prune [--keep N] [--dry-run]`` runs it on demand; with ``--plan-retention N`` (default 50,
0: off) the leader prunes every pool once a minute.
"""

from __future__ import annotations

import structlog

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import PlanInUseError
from controlplane.errors import InvalidArgumentError
from dataplane.core.names import validate_pool

log = structlog.get_logger("controlplane.retention")
DEFAULT_KEEP = 50
RETENTION_INTERVAL_S = 60.0
_ALL = 1_000_000  # list every stored version


async def protected_versions(stores: Stores, pool: str) -> dict[str, str]:
    """Versions a prune never deletes, with the reason."""
    kept: dict[str, str] = {}
    guard = await stores.plans.get_guard(pool)
    if guard is not None:
        for version in (guard.version, guard.from_version):
            if version:
                kept[version] = "guard"
    active = await stores.plans.get_active(pool)
    current = active.version if active is not None else ""
    target = next((v for v in await stores.plans.previous_versions(pool, 0) if v != current), "")
    if target:
        kept[target] = "rollback target"
    if current:
        kept[current] = "active"
    return kept


async def prune(
    stores: Stores, pool: str, *, keep: int, actor: str, now_ms: int, dry_run: bool = False
) -> admin_pb2.PrunePlansResponse:
    """Delete ``pool``'s versions beyond the newest ``keep`` that nothing protects."""
    pool = validate_pool(pool or "default")
    if keep < 1:
        raise InvalidArgumentError(f"keep: at least 1, got {keep}")
    metas = await stores.plans.list_plans(pool, _ALL)  # newest first
    guarded = await protected_versions(stores, pool)
    answer = admin_pb2.PrunePlansResponse(kept=min(keep, len(metas)))
    for meta in metas[keep:]:
        if meta.version in guarded:
            answer.protected[meta.version] = guarded[meta.version]
            continue
        if dry_run:
            answer.removed.append(meta.version)
            continue
        try:
            if await stores.plans.delete_plan(pool, meta.version):
                answer.removed.append(meta.version)
        except PlanInUseError:  # became active or the rollback target meanwhile
            answer.protected[meta.version] = "in use"
    if answer.removed and not dry_run:
        await stores.plans.append_audit(
            cluster_pb2.AuditEvent(
                at_unix_ms=now_ms, actor=actor, action="prune", pool=pool,
                detail=f"kept the newest {keep}; removed {len(answer.removed)}: "
                + ", ".join(answer.removed),
            )
        )  # fmt: skip
        log.info("plans pruned", pool=pool, removed=len(answer.removed), keep=keep, actor=actor)
    return answer


async def prune_all(stores: Stores, keep: int, now_ms: int) -> None:
    """The automatic policy (``--plan-retention``): every pool, as the actor ``retention``."""
    if keep <= 0:
        return
    for pool in await stores.plans.pools():
        await prune(stores, pool, keep=keep, actor="retention", now_ms=now_ms)
