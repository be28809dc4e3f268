"""The shadow-verdict rollout gate: a plan goes out only with a passing shadow-replay verdict.

The paper's operator checklist enables a plan only when replay shows it improves p99 or capacity
over Flat-LB; :mod:`controlplane.shadow` records that verdict on the version. A rollout of a
version whose verdict is missing or not ``pass`` is refused (FAILED_PRECONDITION, the message
names the version and the verdict) unless forced; a forced rollout goes ahead and the audit
event's detail records what was forced past, with the actor (the pointer move's audit).
"""

from __future__ import annotations

from dataclasses import dataclass

from cacheroute.v1 import table_pb2
from cacheroute_state import Stores
from controlplane.errors import PreconditionError

Outcome = table_pb2.ShadowVerdict.Outcome
GATE = "shadow"


@dataclass(frozen=True)
class Refusal:
    """Why a gate refuses a rollout (``gate`` names it in messages and the audit)."""

    gate: str
    message: str


class RolloutRefusedError(PreconditionError):
    """A gate refused; the message says why and how to go past it."""

    def __init__(self, pool: str, version: str, refusal: Refusal) -> None:
        super().__init__(
            f"pool {pool}: rollout of {version} refused ({refusal.gate}: {refusal.message}); "
            "nothing was changed (replay it with `cachectl plan shadow "
            f"{version}`, or roll out with --force, which is recorded in the audit)"
        )
        self.refusal = refusal


async def check_verdict(stores: Stores, pool: str, version: str) -> Refusal | None:
    """None when ``version`` has a passing verdict, else the refusal."""
    meta = await stores.plans.get_metadata(pool, version)
    verdict = meta.verdict if meta is not None else table_pb2.ShadowVerdict()
    if not verdict.decided_at_unix_ms:
        return Refusal(GATE, "no shadow-replay verdict")
    if verdict.outcome != Outcome.OUTCOME_PASS:
        outcome = Outcome.Name(verdict.outcome).removeprefix("OUTCOME_").lower()
        return Refusal(GATE, f"its shadow-replay verdict is {outcome}: {verdict.summary}")
    return None


async def gate_rollout(stores: Stores, pool: str, version: str, *, force: bool, reason: str) -> str:
    """The audit detail for the move: ``reason``, plus what ``force`` went past; raises
    :class:`RolloutRefusedError` when refused and not forced."""
    refusal = await check_verdict(stores, pool, version)
    if refusal is None:
        return reason
    if not force:
        raise RolloutRefusedError(pool, version, refusal)
    forced = f"forced past {refusal.gate}: {refusal.message}"
    return f"{reason} [{forced}]" if reason else f"[{forced}]"
