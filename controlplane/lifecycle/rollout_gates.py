"""The checks every pointer move to a plan passes, and the one way past one: skip it by name.

A gate looks at the candidate plan and the cluster and returns a refusal (or None). Every way a
plan becomes active (``rollout``, ``rollback``, ``rollback --to``, automatic mode and the live
guard's rollback) runs the same list (:func:`run_gates`): every gate runs; any refusal of a gate
that was not skipped stops the move with FAILED_PRECONDITION, an :class:`ActivationRefusedError`
whose typed details (``ActivationRefused``, one ``GateRefusal`` per gate) travel in the gRPC
status, so clients read gate names, never the message text. A gate is skipped only by name
(``--skip-gate shadow``) and only with a reason; the pointer move's audit event then records
each skipped gate and what it would have said, beside the actor and the reason. There is no
"skip everything" switch: the old ``--force`` is gone, so a new gate is never skipped by a
command written before it existed.

The destination gate: a plan whose *warm* destinations (nodes holding warm keys) are not
registered in the pool sends those keys to the fallback on every router, while the routers ACK
and ``status`` looks healthy. Destinations that are registered but down or draining are only
reported: that is a transient state the routers already handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness, list_statuses
from controlplane.core.node_states import state_of
from controlplane.errors import InvalidArgumentError, PreconditionError
from dataplane.core.table import RoutingTable

NAMES_SHOWN = 8
UNREADABLE = "table"  # the refusal of a stored table that does not decode: never skipped


@dataclass(frozen=True)
class Refusal:
    """Why one gate refuses a rollout (``gate`` names it in messages and the audit)."""

    gate: str
    message: str


class RolloutGate(Protocol):
    @property
    def name(self) -> str:
        """Names the gate in refusals and the audit."""
        ...

    async def check(self, stores: Stores, table: RoutingTable, now_ms: int) -> Refusal | None:
        """A refusal, or None when the plan may go out."""
        ...


class ActivationRefusedError(PreconditionError):
    """Gates refused a pointer move; the message names each and how to skip it, and
    :attr:`status_details` carries the same as a typed message for the gRPC status."""

    def __init__(self, pool: str, version: str, action: str, refusals: list[Refusal]) -> None:
        reasons = "; ".join(f"{r.gate}: {r.message}" for r in refusals)
        skips = " ".join(f"--skip-gate {r.gate}" for r in refusals if r.gate != UNREADABLE)
        how = f"fix it, or go past with {skips} --reason TEXT, recorded in the audit"
        super().__init__(
            f"pool {pool}: {action} to {version} refused by gate "
            f"{', '.join(r.gate for r in refusals)} ({reasons}); nothing was changed "
            f"({how if skips else 'store the plan again'})"
        )
        self.refusals = refusals
        self.status_details = admin_pb2.ActivationRefused(
            pool=pool,
            version=version,
            action=action,
            refusals=[admin_pb2.GateRefusal(gate=r.gate, message=r.message) for r in refusals],
        )


@dataclass(frozen=True)
class PlanNodes:
    """What the checks need of a plan: its pool, destinations and which of them are warm."""

    pool: str
    node_ids: tuple[str, ...]
    warm: frozenset[str]

    @classmethod
    def of(cls, table: RoutingTable) -> PlanNodes:
        members = np.unique(np.asarray(table.set_members))
        warm = frozenset(table.node_ids[int(i)] for i in members)
        return cls(table.pool, tuple(table.node_ids), warm)


def _names(ids: list[str]) -> str:
    shown = ", ".join(ids[:NAMES_SHOWN])
    return shown + (f" and {len(ids) - NAMES_SHOWN} more" if len(ids) > NAMES_SHOWN else "")


async def check_destinations(
    stores: Stores, plan: RoutingTable | PlanNodes, now_ms: int, liveness: Liveness
) -> admin_pb2.DestinationCheck:
    """The plan's destinations against the pool's registry right now."""
    nodes = plan if isinstance(plan, PlanNodes) else PlanNodes.of(plan)
    listed = await list_statuses(stores, nodes.pool, now_ms, liveness)
    statuses = {s.record.node_id: s for s in listed}
    check = admin_pb2.DestinationCheck(destinations=len(nodes.node_ids))
    for node in nodes.node_ids:
        status = statuses.get(node)
        if status is None:
            check.missing.append(node)
            if node in nodes.warm:
                check.missing_warm.append(node)
            continue
        check.registered += 1
        if state_of(status) == "healthy":
            check.eligible += 1
        else:
            check.ineligible.append(f"{node} ({state_of(status)})")
    return check


def describe(check: admin_pb2.DestinationCheck) -> str:
    """One line for people: "4 of 4 destinations registered, 3 eligible; missing: ..."."""
    text = (
        f"{check.registered} of {check.destinations} destinations registered in the pool, "
        f"{check.eligible} eligible"
    )
    if check.missing:
        text += f"; not registered: {_names(list(check.missing))}"
    if check.ineligible:
        text += f"; not eligible: {_names(list(check.ineligible))}"
    return text


@dataclass(frozen=True)
class DestinationGate:
    """Refuses a plan with any unregistered warm destination (module docstring)."""

    liveness: Liveness
    name: str = "destinations"

    async def check(self, stores: Stores, table: RoutingTable, now_ms: int) -> Refusal | None:
        found = await check_destinations(stores, table, now_ms, self.liveness)
        if not found.missing_warm:
            return None
        missing = list(found.missing_warm)
        return Refusal(
            self.name,
            f"{len(missing)} of {found.destinations} destinations hold warm keys but are not "
            f"registered nodes of pool {table.pool}: {_names(missing)} (their keys would route "
            "to the fallback; build the plan with the pool's node ids, `cachectl nodes list`)",
        )


def check_skips(gates: Sequence[RolloutGate], skip: Sequence[str], reason: str) -> None:
    """A skip names a gate of this list and comes with a reason (ValueError naming the field)."""
    names = [gate.name for gate in gates]
    unknown = sorted(set(skip) - set(names))
    if unknown:
        raise InvalidArgumentError(
            f"skip_gates: no gate named {', '.join(unknown)} (this control plane's gates: "
            f"{', '.join(names) or 'none'})"
        )
    if skip and not reason.strip():
        raise InvalidArgumentError("reason: required when skipping a gate (the audit records why)")


async def run_gates(
    gates: Sequence[RolloutGate],
    stores: Stores,
    table: RoutingTable,
    *,
    action: str,
    skip: Sequence[str] = (),
    now_ms: int,
) -> str:
    """Run every gate; raise :class:`ActivationRefusedError` for refusals not skipped, else
    return the audit note of the skipped gates ("" when none was skipped)."""
    refused: list[Refusal] = []
    notes: list[str] = []
    for gate in gates:
        refusal = await gate.check(stores, table, now_ms)
        if gate.name in skip:
            said = f"would refuse: {refusal.message}" if refusal else "it passed"
            notes.append(f"{gate.name} ({said})")
        elif refusal is not None:
            refused.append(refusal)
    if refused:
        raise ActivationRefusedError(table.pool, table.version, action, refused)
    return "skipped gate " + "; ".join(notes) if notes else ""
