"""PlanService: thin adapters from the admin RPCs to :mod:`controlplane.lifecycle.plans` and
friends."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc

from cacheroute.v1 import admin_pb2, admin_pb2_grpc, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness
from controlplane.core.plan_diff import diff_plans
from controlplane.lifecycle.audit import list_audit
from controlplane.lifecycle.auto_mode import set_auto_mode
from controlplane.lifecycle.fleet_profile import (
    DEFAULT_MAX_REQUESTS,
    fit_profile,
    get_profile_status,
)
from controlplane.lifecycle.live_plan import BuildRequest, PlanDefaults, build_live_plan
from controlplane.lifecycle.plans import get_plan, import_plan, list_plans, read_plan
from controlplane.lifecycle.pointer_moves import disable, rollback, rollout
from controlplane.lifecycle.retention import DEFAULT_KEEP, prune
from controlplane.lifecycle.rollout_gates import RolloutGate
from controlplane.lifecycle.shadow import ShadowBudget, shadow_plan
from controlplane.lifecycle.status import TtftOf, cluster_status
from controlplane.lifecycle.verdict_gate import standard_gates
from controlplane.metrics import ControlPlaneMetrics
from controlplane.services.rpc import actor_of, rpc
from dataplane.core.table_codec import decode_table
from servekit.clock import Clock, wall_ms

Context = grpc.aio.ServicerContext[Any, Any]
DEFAULT_MOVES = 20


def _expected_generation(
    request: admin_pb2.RolloutRequest | admin_pb2.RollbackRequest | admin_pb2.DisablePlanRequest,
) -> int | None:
    """The generation the caller saw, None when it named none (rollout, rollback, disable)."""
    return request.expected_generation if request.HasField("expected_generation") else None


class PlanServicer(admin_pb2_grpc.PlanServiceServicer):
    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        *,
        defaults: PlanDefaults,
        liveness: Liveness,
        instance_id: str,
        clock: Clock = wall_ms,
        gates: Sequence[RolloutGate] | None = None,
        store: str = "",
        budget: ShadowBudget | None = None,
        ttft_of: TtftOf | None = None,
        retention: int = DEFAULT_KEEP,
    ) -> None:
        self.retention = retention
        self._budget = budget or ShadowBudget()
        self._ttft_of = ttft_of
        self._clock = clock
        self._stores = stores
        self._metrics = metrics
        self._defaults = defaults
        self._liveness = liveness
        self._instance_id = instance_id
        self._store = store
        # Every rollout and rollback passes these (or skips one by name, audited); see
        # controlplane.lifecycle.rollout_gates.
        self.gates: list[RolloutGate] = (
            list(gates) if gates is not None else standard_gates(liveness)
        )

    @rpc
    async def BuildPlan(  # noqa: N802
        self, request: admin_pb2.BuildPlanRequest, context: Context
    ) -> admin_pb2.PlanSummary:
        build = BuildRequest(
            pool=request.pool,
            q_cap=request.q_cap if request.HasField("q_cap") else None,
            slots_per_node=request.slots_per_node if request.HasField("slots_per_node") else None,
            placement=request.placement,
            actor=actor_of(request.actor, context),
            note=request.note,
        )
        return await build_live_plan(
            self._stores,
            build,
            defaults=self._defaults,
            liveness=self._liveness,
            metrics=self._metrics,
            trigger="rpc",
            now_ms=self._clock(),
        )

    @rpc
    async def ImportPlan(  # noqa: N802
        self, request: admin_pb2.ImportPlanRequest, context: Context
    ) -> admin_pb2.PlanSummary:
        actor = actor_of(request.actor, context)
        return await import_plan(
            self._stores,
            request.table,
            actor=actor,
            note=request.note,
            now_ms=self._clock(),
            liveness=self._liveness,
        )

    @rpc
    async def ListPlans(  # noqa: N802
        self, request: admin_pb2.ListPlansRequest, context: Context
    ) -> admin_pb2.ListPlansResponse:
        return await list_plans(self._stores, request.pool, request.limit)

    @rpc
    async def GetPlan(  # noqa: N802
        self, request: admin_pb2.GetPlanRequest, context: Context
    ) -> admin_pb2.GetPlanResponse:
        return await get_plan(
            self._stores,
            request.pool,
            request.version,
            top_keys=request.top_keys,
            include_table=request.include_table,
            now_ms=self._clock(),
            liveness=self._liveness,
        )

    @rpc
    async def DiffPlans(  # noqa: N802
        self, request: admin_pb2.DiffPlansRequest, context: Context
    ) -> admin_pb2.PlanDiff:
        _, old_bytes = await read_plan(self._stores, request.pool, request.from_version)
        _, new_bytes = await read_plan(self._stores, request.pool, request.to_version)
        old = await asyncio.to_thread(decode_table, old_bytes, verify_hash=False)
        new = await asyncio.to_thread(decode_table, new_bytes, verify_hash=False)
        return await asyncio.to_thread(diff_plans, old, new, request.limit or DEFAULT_MOVES)

    @rpc
    async def ShadowPlan(  # noqa: N802
        self, request: admin_pb2.ShadowPlanRequest, context: Context
    ) -> table_pb2.ShadowVerdict:
        actor = actor_of(request.actor, context)
        return await shadow_plan(
            self._stores, request, actor=actor, now_ms=self._clock(), budget=self._budget
        )

    @rpc
    async def FitProfile(  # noqa: N802
        self, request: admin_pb2.FitProfileRequest, context: Context
    ) -> cluster_pb2.FleetProfile:
        actor = actor_of(request.actor, context)
        return await fit_profile(
            self._stores, request, actor=actor, now_ms=self._clock(),
            max_requests=min(self._budget.max_requests, DEFAULT_MAX_REQUESTS),
        )  # fmt: skip

    @rpc
    async def GetProfile(  # noqa: N802
        self, request: admin_pb2.GetProfileRequest, context: Context
    ) -> admin_pb2.GetProfileResponse:
        return await get_profile_status(self._stores, request)

    @rpc
    async def Rollout(  # noqa: N802
        self, request: admin_pb2.RolloutRequest, context: Context
    ) -> cluster_pb2.ActivePointer:
        return await rollout(
            self._stores,
            request.pool,
            request.version,
            _expected_generation(request),
            actor=actor_of(request.actor, context),
            reason=request.reason,
            gates=self.gates,
            skip_gates=list(request.skip_gates),
            now_ms=self._clock(),
        )

    @rpc
    async def DisablePlan(  # noqa: N802
        self, request: admin_pb2.DisablePlanRequest, context: Context
    ) -> cluster_pb2.ActivePointer:
        return await disable(
            self._stores,
            request.pool,
            _expected_generation(request),
            actor=actor_of(request.actor, context),
            reason=request.reason,
        )

    @rpc
    async def Rollback(  # noqa: N802
        self, request: admin_pb2.RollbackRequest, context: Context
    ) -> cluster_pb2.ActivePointer:
        return await rollback(
            self._stores,
            request.pool,
            request.to_version,
            _expected_generation(request),
            actor=actor_of(request.actor, context),
            reason=request.reason,
            gates=self.gates,
            skip_gates=list(request.skip_gates),
            now_ms=self._clock(),
        )

    @rpc
    async def GetStatus(  # noqa: N802
        self, request: admin_pb2.GetStatusRequest, context: Context
    ) -> admin_pb2.ClusterStatus:
        return await cluster_status(
            self._stores,
            request.pool,
            now_ms=self._clock(),
            liveness=self._liveness,
            instance_id=self._instance_id,
            store=self._store,
            ttft_of=self._ttft_of,
        )

    @rpc
    async def SetAutoMode(  # noqa: N802
        self, request: admin_pb2.SetAutoModeRequest, context: Context
    ) -> cluster_pb2.AutoMode:
        actor = actor_of(request.actor, context)
        return await set_auto_mode(self._stores, request, actor=actor, now_ms=self._clock())

    @rpc
    async def ListAudit(  # noqa: N802
        self, request: admin_pb2.ListAuditRequest, context: Context
    ) -> admin_pb2.ListAuditResponse:
        return await list_audit(self._stores, request)

    @rpc
    async def PrunePlans(  # noqa: N802
        self, request: admin_pb2.PrunePlansRequest, context: Context
    ) -> admin_pb2.PrunePlansResponse:
        return await prune(
            self._stores,
            request.pool,
            keep=request.keep or self.retention or DEFAULT_KEEP,
            actor=actor_of(request.actor, context),
            now_ms=self._clock(),
            dry_run=request.dry_run,
        )
