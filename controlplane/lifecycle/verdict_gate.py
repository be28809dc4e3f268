"""The shadow-verdict rollout gate: a plan goes out only with a passing shadow-replay verdict.

The paper's operator checklist enables a plan only when replay shows it improves p99 or capacity
over Flat-LB; :mod:`controlplane.lifecycle.shadow` records that verdict on the version. This gate
(one :class:`controlplane.lifecycle.rollout_gates.RolloutGate`) refuses a version whose verdict is
missing or not ``pass``; the shared refusal path answers FAILED_PRECONDITION naming it, and
``--force`` goes ahead with "forced past shadow: ..." in the rollout's audit detail, with the actor.
"""

from __future__ import annotations

from dataclasses import dataclass

from cacheroute.v1 import table_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.rollout_gates import Refusal
from dataplane.core.table import RoutingTable

Outcome = table_pb2.ShadowVerdict.Outcome


async def verdict_refusal(stores: Stores, pool: str, version: str, gate: str) -> Refusal | None:
    """None when ``version`` has a passing verdict, else the refusal."""
    meta = await stores.plans.get_metadata(pool, version)
    verdict = meta.verdict if meta is not None else table_pb2.ShadowVerdict()
    if not verdict.decided_at_unix_ms:
        return Refusal(
            gate, f"no shadow-replay verdict (replay it with `cachectl plan shadow {version}`)"
        )
    if verdict.outcome != Outcome.OUTCOME_PASS:
        outcome = Outcome.Name(verdict.outcome).removeprefix("OUTCOME_").lower()
        return Refusal(gate, f"its shadow-replay verdict is {outcome}: {verdict.summary}")
    return None


@dataclass(frozen=True)
class ShadowVerdictGate:
    """Refuses a version without a passing shadow verdict (module docstring)."""

    name: str = "shadow"

    async def check(self, stores: Stores, table: RoutingTable, now_ms: int) -> Refusal | None:
        return await verdict_refusal(stores, table.pool, table.version, self.name)
