"""The active pointer's two shared rules: the conflict message, and what a damaged record is.

Both stores raise :class:`~cacheroute_state.interfaces.ConflictError` with
:func:`conflict_message`, so the message is built once, where the conflict is seen. A pointer
record that does not decode raises :class:`~cacheroute_state.interfaces.CorruptRecordError`
(FAILED_PRECONDITION naming the record) from ``get_active``; :func:`active_or_damage` turns it
into a pointer that *shows* the damage (action ``corrupt``) so status and list still answer, and
:func:`generation_to_expect` gives a rollout, rollback or ``plan disable`` the generation to
compare-and-set against, so any of them overwrites the damaged record.
"""

from __future__ import annotations

import datetime

from cacheroute.v1 import cluster_pb2
from cacheroute_state.interfaces import CorruptRecordError, PlanStore

CORRUPT_ACTION = "corrupt"


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def conflict_message(pool: str, expected: int, current: cluster_pb2.ActivePointer | None) -> str:
    if current is None:
        where = "has no active pointer"
    else:
        where = (
            f"is at generation {current.generation} (version {current.version}, "
            f"{current.action or 'moved'} by {current.actor or '?'} at "
            f"{_when(current.updated_at_unix_ms)})"
        )
    return (
        f"pool {pool}: the active pointer {where}, not the expected generation {expected}; "
        "nothing was changed (re-check with `cachectl status` and retry)"
    )


def damaged(pool: str, exc: CorruptRecordError) -> cluster_pb2.ActivePointer:
    """A stand-in pointer that says the record is damaged (no version: routers hold theirs)."""
    return cluster_pb2.ActivePointer(
        pool=pool,
        version="",
        generation=exc.generation,
        action=CORRUPT_ACTION,
        actor=f"{exc.record} does not decode; roll out, roll back or disable to overwrite it",
    )


def is_damaged(pointer: cluster_pb2.ActivePointer | None) -> bool:
    return pointer is not None and pointer.action == CORRUPT_ACTION and not pointer.version


async def active_or_damage(plans: PlanStore, pool: str) -> cluster_pb2.ActivePointer | None:
    """The pool's pointer, or :func:`damaged` when its record does not decode."""
    try:
        return await plans.get_active(pool)
    except CorruptRecordError as exc:
        return damaged(pool, exc)


async def generation_to_expect(plans: PlanStore, pool: str) -> int:
    """The generation a move must expect now (that of a damaged record included)."""
    pointer = await active_or_damage(plans, pool)
    return pointer.generation if pointer is not None else 0
