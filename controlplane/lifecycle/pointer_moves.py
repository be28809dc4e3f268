"""Moving a pool's active pointer: rollout, rollback and disable, through the gates.

Plans are immutable versions in the store; the active pointer moves only by compare-and-set, so
every control-plane instance may serve these calls. A rollout or rollback without an expected
generation uses the generation read just before the move, so of two concurrent moves from the
same generation exactly one wins and the other gets a :class:`ConflictError` that names the
generation, version and actor that won. Every write is audited with its actor (pointer moves by
the store's Lua script, imports here); importing content that is already stored is not a write.

A rollout and a rollback (to the previous version or ``--to`` one) are the same move,
:func:`activate`, which first runs the gates (:mod:`controlplane.lifecycle.rollout_gates`: the
destinations, and a passing shadow verdict, :mod:`controlplane.lifecycle.verdict_gate`); a gate is
skipped only by name, with a reason, and the skip is recorded in the audit. ``disable`` moves
the pointer to no table (empty version) under a new generation, ungated (Flat-LB needs no plan);
a rollback from there re-activates the last plan, gated like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from cacheroute.v1 import cluster_pb2, table_pb2
from cacheroute_state import Stores
from cacheroute_state.active_pointer import active_or_damage, generation_to_expect, is_damaged
from cacheroute_state.interfaces import PlanNotFoundError
from controlplane.errors import PreconditionError
from controlplane.lifecycle.deltas import store_deltas
from controlplane.lifecycle.rollout_gates import (
    UNREADABLE,
    ActivationRefusedError,
    Refusal,
    RolloutGate,
    check_skips,
    run_gates,
)
from dataplane.core.names import validate_pool, validate_version
from dataplane.core.table import TableError
from dataplane.core.table_codec import decode_table


async def _require_plan(stores: Stores, pool: str, version: str) -> table_pb2.PlanMetadata:
    """The stored version's metadata (small), or NOT_FOUND: how a move learns a plan exists."""
    meta = await stores.plans.get_metadata(pool, version)
    if meta is None:
        raise PlanNotFoundError(
            f"plan {version} not found in pool {pool} (`cachectl plan list` shows the stored ones)"
        )
    return meta


async def _gate(
    stores: Stores,
    pool: str,
    version: str,
    *,
    action: str,
    gates: Sequence[RolloutGate],
    skip: Sequence[str],
    now_ms: int,
) -> str:
    """Run the gates on the stored table (read once); the audit note of skipped gates."""
    data = await stores.plans.get_table_bytes(pool, version)
    if data is None:
        raise PlanNotFoundError(f"plan {version} in pool {pool} has metadata but no table")
    try:
        table = await asyncio.to_thread(decode_table, data, verify_hash=False)
    except TableError as exc:  # stored bytes gone bad: every router would NACK it; no skip
        refusal = Refusal(UNREADABLE, f"the stored table does not decode: {exc}")
        raise ActivationRefusedError(pool, version, action, [refusal]) from None
    return await run_gates(gates, stores, table, action=action, skip=skip, now_ms=now_ms)


async def _audit_refusal(
    stores: Stores, refused: ActivationRefusedError, *, actor: str, reason: str, now_ms: int
) -> None:
    """Record who tried which move and which gates said no, as ``<action>_refused``."""
    details = refused.status_details
    gates = "; ".join(f"{r.gate}: {r.message}" for r in details.refusals)
    await stores.plans.append_audit(
        cluster_pb2.AuditEvent(
            at_unix_ms=now_ms,
            actor=actor,
            action=f"{details.action}_refused",
            pool=details.pool,
            to_version=details.version,
            detail=f"{reason}; refused by {gates}" if reason else f"refused by {gates}",
        )
    )


async def activate(
    stores: Stores,
    pool: str,
    version: str,
    expected_generation: int | None,
    *,
    actor: str,
    action: str,
    reason: str,
    gates: Sequence[RolloutGate] = (),
    skip_gates: Sequence[str] = (),
    now_ms: int = 0,
) -> cluster_pb2.ActivePointer:
    """Make ``version`` active once every gate not in ``skip_gates`` passes: the one path of
    rollout, rollback and automatic mode. Audited as ``action`` with the reason and the skips."""
    check_skips(gates, skip_gates, reason)
    await _require_plan(stores, pool, version)  # NOT_FOUND before any gate or generation check
    if gates:
        try:
            skipped = await _gate(
                stores, pool, version, action=action, gates=gates, skip=skip_gates, now_ms=now_ms
            )
        except ActivationRefusedError as exc:  # a refused move is audited too (issue 34)
            await _audit_refusal(stores, exc, actor=actor, reason=reason, now_ms=now_ms)
            raise
        if skipped:
            reason = f"{reason}; {skipped}" if reason else skipped
    await store_deltas(stores, pool, version)  # routers then fetch what changed, not it all
    if expected_generation is None:  # a damaged pointer's too: the move overwrites it
        expected_generation = await generation_to_expect(stores.plans, pool)
    # A lost race is the store's ConflictError, its message built once where the pointer is read.
    return await stores.plans.move_active(
        pool,
        version,
        expected_generation=expected_generation,
        actor=actor,
        action=action,
        detail=reason,
    )


async def rollout(
    stores: Stores,
    pool: str,
    version: str,
    expected_generation: int | None,
    *,
    actor: str,
    reason: str,
    gates: Sequence[RolloutGate] = (),
    skip_gates: Sequence[str] = (),
    now_ms: int = 0,
) -> cluster_pb2.ActivePointer:
    """Activate ``version`` through the gates (:func:`activate`)."""
    pool = validate_pool(pool)
    validate_version(version)
    return await activate(
        stores, pool, version, expected_generation, actor=actor, action="rollout",
        reason=reason, gates=gates, skip_gates=skip_gates, now_ms=now_ms,
    )  # fmt: skip


async def disable(
    stores: Stores, pool: str, expected_generation: int | None, *, actor: str, reason: str
) -> cluster_pb2.ActivePointer:
    """Point the pool at no table under a new generation: routers fall back to Flat-LB."""
    pool = validate_pool(pool)
    current = await active_or_damage(stores.plans, pool)
    if current is None or not (current.version or is_damaged(current)):
        raise PreconditionError(
            f"pool {pool} has no active plan; its routers already route by Flat-LB (no_table)"
        )
    if expected_generation is None:
        expected_generation = current.generation
    return await stores.plans.move_active(
        pool, "", expected_generation=expected_generation, actor=actor, action="disable",
        detail=reason,
    )  # fmt: skip


async def rollback(
    stores: Stores,
    pool: str,
    to_version: str,
    expected_generation: int | None,
    *,
    actor: str,
    reason: str,
    gates: Sequence[RolloutGate] = (),
    skip_gates: Sequence[str] = (),
    now_ms: int = 0,
) -> cluster_pb2.ActivePointer:
    """Re-activate ``to_version`` (default: the version active before the current one) under a
    new generation, through the same gates as a rollout (:func:`activate`)."""
    pool = validate_pool(pool)
    if to_version:
        validate_version(to_version)
    current = await active_or_damage(stores.plans, pool)
    if current is None:
        raise PreconditionError(f"pool {pool} has no active plan to roll back from")
    if not to_version:
        earlier = [v for v in await stores.plans.previous_versions(pool) if v != current.version]
        if not earlier:
            raise PreconditionError(
                f"pool {pool} has no earlier active version than {current.version}; "
                "name one with --to"
            )
        to_version = earlier[0]
    if expected_generation is None:
        expected_generation = current.generation
    return await activate(
        stores, pool, to_version, expected_generation, actor=actor, action="rollback",
        reason=reason, gates=gates, skip_gates=skip_gates, now_ms=now_ms,
    )  # fmt: skip
