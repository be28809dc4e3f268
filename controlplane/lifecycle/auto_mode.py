"""Automatic mode: per pool, build → shadow → roll out only passing plans, on the leader's timer.

Off by default; ``SetAutoMode`` (``cachectl plan auto enable|disable --pool P``) turns it on or
off in the pool's ``AutoMode`` record, audited with the actor. Every ``--auto-interval`` the
leader runs one round per pool whose mode is on:

1. wait while the live guard watches the pool's last rollout
   (:mod:`controlplane.lifecycle.live_guard`): one change at a time, judged before the next;
2. build from live rates (:func:`controlplane.lifecycle.live_plan.build_live_plan`, churn-aware
   against the active plan), as the actor ``automatic-mode``; the same version as the active one:
   no change;
3. shadow-replay it on the routers' sampled trace
   (:func:`controlplane.lifecycle.shadow.shadow_plan`, with the configured budget ``--shadow-*``),
   which records the verdict on the version;
4. roll out a plan that did not fail through the normal path
   (:func:`controlplane.lifecycle.pointer_moves.rollout`, every rollout gate included, none
   skipped: the shadow gate decides on an inconclusive verdict by the operator's
   ``--shadow-inconclusive`` rule), as ``automatic-mode``, compare-and-set against the
   generation read at the round's start (a pointer moved meanwhile, by an operator or the
   guard, wins); a failing or refused one stays
   stored, not active. A rollout of this mode that the guard has not yet picked up
   also makes the next round wait (the guard ticks every second, a round may start sooner).

Each round's outcome goes into the record's ``last_decision`` (``cachectl status`` shows it), a
log line and ``cacheroute_controlplane_auto_rounds_total``.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ConflictError
from controlplane.cluster.nodes import Liveness
from controlplane.errors import PreconditionError
from controlplane.lifecycle.live_guard import AUTO_ACTOR
from controlplane.lifecycle.live_plan import BuildRequest, PlanDefaults, build_live_plan
from controlplane.lifecycle.pointer_moves import rollout
from controlplane.lifecycle.rollout_gates import ActivationRefusedError, RolloutGate
from controlplane.lifecycle.shadow import ShadowBudget, shadow_plan
from controlplane.metrics import ControlPlaneMetrics
from dataplane.core.names import validate_pool

log = structlog.get_logger("controlplane.auto")
Phase = cluster_pb2.GuardState.Phase
PASS = table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS
INCONCLUSIVE = table_pb2.ShadowVerdict.Outcome.OUTCOME_INCONCLUSIVE


def verdict_word(verdict: table_pb2.ShadowVerdict) -> str:
    """``pass``, ``fail``, ``inconclusive`` ... of a verdict."""
    return table_pb2.ShadowVerdict.Outcome.Name(verdict.outcome).removeprefix("OUTCOME_").lower()


async def set_auto_mode(
    stores: Stores, request: admin_pb2.SetAutoModeRequest, *, actor: str, now_ms: int
) -> cluster_pb2.AutoMode:
    """Turn a pool's automatic mode on or off; audited as ``auto_enable`` / ``auto_disable``."""
    pool = validate_pool(request.pool or "default")
    record = await stores.plans.get_auto_mode(pool) or cluster_pb2.AutoMode(pool=pool)
    record.enabled = request.enabled
    record.actor = actor
    record.updated_at_unix_ms = now_ms
    record.reason = request.reason
    if request.enabled:
        await stores.plans.add_pool(pool)
    await stores.plans.put_auto_mode(record)
    action = "auto_enable" if request.enabled else "auto_disable"
    await stores.plans.append_audit(
        cluster_pb2.AuditEvent(
            at_unix_ms=now_ms, actor=actor, action=action, pool=pool, detail=request.reason
        )
    )
    log.info("automatic mode set", pool=pool, enabled=request.enabled, actor=actor)
    return record


class AutoPilot:
    """One round per enabled pool (module docstring); :meth:`round_all` is the loop body."""

    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        *,
        defaults: PlanDefaults,
        liveness: Liveness,
        gates: Sequence[RolloutGate],
        budget: ShadowBudget,
        profile: str = "",
    ) -> None:
        self._stores = stores
        self._metrics = metrics
        self._defaults = defaults
        self._liveness = liveness
        self._gates = list(gates)
        self._budget = budget
        self._profile = profile

    async def round_all(self, now_ms: int) -> dict[str, str]:
        done: dict[str, str] = {}
        for pool in await self._stores.plans.pools():
            mode = await self._stores.plans.get_auto_mode(pool)
            if mode is None or not mode.enabled:
                continue
            outcome, decision = await self.round(pool, now_ms)
            done[pool] = outcome
            self._metrics.auto_rounds.labels(pool, outcome).inc()
            fresh = await self._stores.plans.get_auto_mode(pool)
            if fresh is not None and fresh.enabled:  # not turned off meanwhile
                fresh.last_decision = decision
                fresh.last_decision_at_unix_ms = now_ms
                await self._stores.plans.put_auto_mode(fresh)
            log.info("automatic round", pool=pool, outcome=outcome, decision=decision)
        return done

    async def round(self, pool: str, now_ms: int) -> tuple[str, str]:
        """(outcome label, decision text) of one round in ``pool``."""
        guard = await self._stores.plans.get_guard(pool)
        if guard is not None and guard.phase == Phase.PHASE_WATCHING:
            return "waiting", f"waiting for the live guard to judge {guard.version}"
        active = await self._stores.plans.get_active(pool) or cluster_pb2.ActivePointer()
        unseen = guard is None or guard.generation != active.generation
        if active.actor == AUTO_ACTOR and active.action == "rollout" and unseen:
            # rolled out by a previous round; the guard has not picked it up yet
            return "waiting", f"waiting for the live guard to watch {active.version}"
        generation = active.generation
        try:
            built = await build_live_plan(
                self._stores,
                BuildRequest(pool=pool, actor=AUTO_ACTOR, note="automatic mode"),
                defaults=self._defaults,
                liveness=self._liveness,
                metrics=self._metrics,
                trigger="auto",
                now_ms=now_ms,
            )
        except PreconditionError as exc:
            return "skipped", f"no plan built: {exc}"
        version = built.metadata.version
        if built.active:
            return "unchanged", f"the built plan {version} is already active"
        try:
            verdict = await shadow_plan(
                self._stores,
                admin_pb2.ShadowPlanRequest(pool=pool, version=version, profile=self._profile),
                actor=AUTO_ACTOR,
                now_ms=now_ms,
                budget=self._budget,
            )
        except (PreconditionError, ValueError) as exc:
            return "skipped", f"{version} not replayed: {exc}"
        if verdict.outcome not in (PASS, INCONCLUSIVE):
            return "shadow_failed", f"{version} not rolled out: shadow {verdict.summary}"
        try:
            pointer = await rollout(
                self._stores, pool, version, generation, actor=AUTO_ACTOR,
                reason=f"automatic mode: shadow {verdict_word(verdict)} ({verdict.summary})",
                gates=self._gates, now_ms=now_ms,
            )  # fmt: skip
        except ActivationRefusedError as exc:  # a gate said no (inconclusive, destinations)
            gates = ", ".join(r.gate for r in exc.refusals)
            return "refused", f"{version} not rolled out: refused by gate {gates}: {exc}"
        except (PreconditionError, ConflictError) as exc:  # the pointer moved
            return "skipped", f"{version} not rolled out: {exc}"
        return "rolled_out", f"rolled out {version} at generation {pointer.generation}"
