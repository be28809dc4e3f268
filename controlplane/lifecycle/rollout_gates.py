"""Checks a rollout must pass, and the one way past them (``force``), recorded in the audit.

A gate looks at the candidate plan and the cluster and returns a refusal (or None). Every gate
runs; without ``force`` any refusal stops the rollout with FAILED_PRECONDITION naming all of
them; with ``force`` the rollout goes ahead and the refusals go into the audit event's detail
with the actor. A new gate (e.g. a shadow-replay verdict) is one more :class:`RolloutGate` in
the list :func:`controlplane.lifecycle.plans.rollout` is given; the refusal path is shared.

The destination gate: a plan whose *warm* destinations (nodes holding warm keys) are not
registered in the pool sends those keys to the fallback on every router, while the routers ACK
and ``status`` looks healthy. Destinations that are registered but down or draining are only
reported: that is a transient state the routers already handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness, list_statuses
from controlplane.core.node_states import state_of
from controlplane.errors import PreconditionError
from dataplane.core.table import RoutingTable

NAMES_SHOWN = 8


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


class RolloutRefusedError(PreconditionError):
    """One or more gates refused; the message names each and says how to force."""

    def __init__(self, pool: str, version: str, refusals: list[Refusal]) -> None:
        reasons = "; ".join(f"{r.gate}: {r.message}" for r in refusals)
        super().__init__(
            f"pool {pool}: rollout of {version} refused ({reasons}); nothing was changed "
            "(fix it, or roll out with --force, which is recorded in the audit)"
        )
        self.refusals = refusals


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


def refuse_or_force(refusals: list[Refusal], pool: str, version: str, *, force: bool) -> str:
    """Raise :class:`RolloutRefusedError` for ``refusals`` unless ``force``; returns the audit
    note of a forced rollout ("" when nothing refused)."""
    if not refusals:
        return ""
    if not force:
        raise RolloutRefusedError(pool, version, refusals)
    return "forced past " + "; ".join(f"{r.gate}: {r.message}" for r in refusals)


async def run_gates(
    gates: list[RolloutGate], stores: Stores, table: RoutingTable, *, force: bool, now_ms: int
) -> str:
    """Run every gate, then :func:`refuse_or_force` on what they said."""
    refusals = [r for gate in gates if (r := await gate.check(stores, table, now_ms)) is not None]
    return refuse_or_force(refusals, table.pool, table.version, force=force)
