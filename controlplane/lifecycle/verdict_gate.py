"""The shadow-verdict rollout gate: a plan goes out only with a passing shadow-replay verdict.

The paper's operator checklist enables a plan only when replay shows it improves p99 or capacity
over Flat-LB; :mod:`controlplane.lifecycle.shadow` records that verdict on the version. This gate
(one :class:`controlplane.lifecycle.rollout_gates.RolloutGate`) refuses a version whose verdict is
missing, ``fail`` or ``error``. An ``inconclusive`` verdict (fewer sampled requests than
``--shadow-min-samples``) follows the operator's rule ``--shadow-inconclusive``: ``refuse`` (the
default: no evidence is not a pass) or ``allow`` (a small or new pool may roll out on the
destination check alone). ``--skip-gate shadow --reason TEXT`` goes past it, audited.
"""

from __future__ import annotations

from dataclasses import dataclass

from cacheroute.v1 import table_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness
from controlplane.lifecycle.rollout_gates import DestinationGate, Refusal, RolloutGate
from dataplane.core.table import RoutingTable

Outcome = table_pb2.ShadowVerdict.Outcome
INCONCLUSIVE_RULES = ("refuse", "allow")


async def verdict_refusal(
    stores: Stores, pool: str, version: str, gate: str, *, allow_inconclusive: bool = False
) -> Refusal | None:
    """None when ``version`` has a passing verdict (or an allowed inconclusive one), else the
    refusal."""
    meta = await stores.plans.get_metadata(pool, version)
    verdict = meta.verdict if meta is not None else table_pb2.ShadowVerdict()
    if not verdict.decided_at_unix_ms:
        return Refusal(
            gate, f"no shadow-replay verdict (replay it with `cachectl plan shadow {version}`)"
        )
    if verdict.outcome == Outcome.OUTCOME_PASS:
        return None
    if verdict.outcome == Outcome.OUTCOME_INCONCLUSIVE and allow_inconclusive:
        return None
    outcome = Outcome.Name(verdict.outcome).removeprefix("OUTCOME_").lower()
    rule = (
        " (the control plane's --shadow-inconclusive rule is refuse)"
        if verdict.outcome == Outcome.OUTCOME_INCONCLUSIVE
        else ""
    )
    return Refusal(gate, f"its shadow-replay verdict is {outcome}{rule}: {verdict.summary}")


@dataclass(frozen=True)
class ShadowVerdictGate:
    """Refuses a version without a passing shadow verdict (module docstring)."""

    allow_inconclusive: bool = False
    name: str = "shadow"

    async def check(self, stores: Stores, table: RoutingTable, now_ms: int) -> Refusal | None:
        return await verdict_refusal(
            stores, table.pool, table.version, self.name, allow_inconclusive=self.allow_inconclusive
        )


def standard_gates(liveness: Liveness, *, allow_inconclusive: bool = False) -> list[RolloutGate]:
    """The gates of every pointer move to a plan, in the order they are reported."""
    return [DestinationGate(liveness), ShadowVerdictGate(allow_inconclusive=allow_inconclusive)]
