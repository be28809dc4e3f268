"""Build a plan from live data: the rate estimate over the pool's current healthy nodes.

Used by BuildPlan (on any instance) and by the leader's ``--plan-interval`` loop. A built plan is
stored, never activated: activation is an operator's rollout (after ``plan diff``/``plan show``,
and later the shadow gate), so a bad estimate cannot reach the routers on its own.

With a plan active in the pool, the build is churn-aware (:mod:`controlplane.core.replanner`): it
keeps the active plan's placements that still fit within ``imbalance_tolerance`` of a fresh plan's
imbalance, changing at most ``max_churn`` (``--max-churn``, 10%) of the keys, and its metadata
records the churn against the active version (``ReplanInfo``).

Inputs: destinations are the pool's nodes that are healthy and not draining (weights from their
records); rates are :func:`controlplane.cluster.key_rate_tracker.current_rates`; ``q_cap`` defaults
to the configured one, and when that is 0 to the mean per-destination rate (total rate /
destinations), so no key gets more than one destination's fair share per replica. The estimator's
unattributed traffic (the cold tail of keys never reported as heavy hitters) is added to the plan's
statistics after the build: the planner spreads the tail in proportion to weight, which shifts
every destination's normalised load equally and so never changes the placement, only
``total_rate``, ``tail_rate``, ``planned_load``, ``planned_imbalance`` and
``admitted_rate_share``.

With ``cache_budget`` > 0 (``--cache-budget``) and lpt placement, admission is byte-aware
(:mod:`controlplane.core.byte_admission`, ``byte_rank``) with each key's size from
:mod:`controlplane.core.live_sizes` (configured sizes win over the routers' reported ones); when no
key has a size yet the build uses equal slots.

Residency (issue 31): an active-plan key whose shared prefix an agent reports not resident on a
node where the plan places it (its planned hit collapsed: the engine restarted or evicts it) is
demoted to the tail for this build, logged and counted
(``cacheroute_controlplane_planned_keys_demoted_total``); a later build admits it again once it
is no longer reported absent.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import structlog

from cacheroute.v1 import admin_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.cluster.key_rate_tracker import current_rates
from controlplane.cluster.nodes import Liveness, effective_weight, list_statuses
from controlplane.core.churn import churn
from controlplane.core.live_sizes import plan_sizes
from controlplane.core.planner import PlanInput, build_plan
from controlplane.core.replanner import DEFAULT_MAX_CHURN, DEFAULT_TOLERANCE, Replan, replan
from controlplane.core.residency import collapsed_keys, demote
from controlplane.errors import InvalidArgumentError, PreconditionError
from controlplane.lifecycle.plans import metadata_for, store_plan
from controlplane.metrics import ControlPlaneMetrics
from dataplane.core.names import validate_pool
from dataplane.core.table import PLACEMENTS, RoutingTable
from dataplane.core.table_codec import decode_table, encode_table


@dataclass(frozen=True)
class PlanDefaults:
    q_cap: float = 0.0
    slots_per_node: int = 8
    half_life_s: float = 60.0
    max_keys: int = 250_000
    churn_aware: bool = True  # replan against the active plan (controlplane/core/replanner.py)
    imbalance_tolerance: float = DEFAULT_TOLERANCE
    max_churn: float | None = DEFAULT_MAX_CHURN  # the replanner's churn cap per build
    cache_budget: float = 0.0  # prefix blocks per destination; > 0: byte-aware admission
    byte_rank: str = "best"
    prefix_sizes: Mapping[str, float] = field(default_factory=dict)  # configured, by key


log = structlog.get_logger("controlplane.lifecycle.live_plan")


@dataclass(frozen=True)
class BuildRequest:
    pool: str
    q_cap: float | None = None
    slots_per_node: int | None = None
    placement: str = ""
    actor: str = "planner"
    note: str = ""


def with_extra_tail(table: RoutingTable, extra: float) -> RoutingTable:
    """The plan's statistics with ``extra`` requests/s of unattributed cold tail added."""
    if extra <= 0:
        return table
    stats = table.stats
    n = len(table.node_ids)
    weights = list(table.params.node_weights) or [1.0] * n
    weight_sum = math.fsum(weights)
    loads = [
        load + extra * w / weight_sum for load, w in zip(stats.planned_load, weights, strict=True)
    ]
    normalised = [load / w for load, w in zip(loads, weights, strict=True)]
    mean = math.fsum(normalised) / n
    total = stats.total_rate + extra
    admitted = stats.admitted_rate_share * stats.total_rate
    return replace(
        table,
        stats=replace(
            stats,
            total_rate=total,
            tail_rate=stats.tail_rate + extra,
            planned_load=tuple(loads),
            planned_imbalance=max(normalised) / mean if mean > 0 else 1.0,
            admitted_rate_share=admitted / total,
        ),
    )


async def _plan_input(
    stores: Stores, request: BuildRequest, defaults: PlanDefaults, liveness: Liveness, now_ms: int
) -> tuple[PlanInput, float]:
    pool = validate_pool(request.pool)
    placement = request.placement or "lpt"
    if placement not in PLACEMENTS:
        raise InvalidArgumentError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    statuses = await list_statuses(stores, pool, now_ms, liveness)
    eligible = [s for s in statuses if s.load.healthy and not s.load.draining]
    if not eligible:
        raise PreconditionError(
            f"pool {pool} has no healthy, undrained nodes ({len(statuses)} registered); start "
            "agents or add static nodes with `cachectl nodes add`"
        )
    rates = await current_rates(stores, pool, defaults.half_life_s, defaults.max_keys)
    if rates.total_rate <= 0 or rates.key_hashes.size == 0:
        raise PreconditionError(
            f"pool {pool} has no traffic yet: no router has reported per-key counts; route some "
            "requests or import a plan built offline (`cachectl plan import`)"
        )
    q_cap = defaults.q_cap if request.q_cap is None else request.q_cap
    if q_cap == 0:
        q_cap = rates.total_rate / len(eligible)
    weights = [effective_weight(s.record.weight) for s in eligible]
    plan_input = PlanInput(
        key_hashes=rates.key_hashes,
        rates=rates.rates,
        node_ids=[s.record.node_id for s in eligible],
        q_cap=q_cap,
        slots_per_node=(
            defaults.slots_per_node if request.slots_per_node is None else request.slots_per_node
        ),
        node_weights=weights if any(w != 1.0 for w in weights) else (),
        placement=placement,
        pool=pool,
        key_labels=rates.labels,
    )
    if defaults.cache_budget > 0 and placement == "lpt":
        sized = plan_sizes(
            rates.key_hashes, rates.labels, rates.prefix_blocks, defaults.prefix_sizes
        )
        if sized is None:
            log.info("byte-aware admission waits for prefix sizes", pool=pool)
        else:
            log.info(
                "byte-aware admission", pool=pool, configured=sized.configured,
                reported=sized.reported, filled=sized.filled,
            )  # fmt: skip
            plan_input = replace(
                plan_input, prefix_sizes=sized.sizes, cache_budget=defaults.cache_budget,
                byte_rank=defaults.byte_rank,
            )  # fmt: skip
    return plan_input, rates.tail_rate


async def demote_collapsed(
    stores: Stores, plan_input: PlanInput, active: RoutingTable | None, metrics: ControlPlaneMetrics
) -> tuple[PlanInput, float]:
    """Demote to the tail the active plan's keys whose prefix collapsed on a node where they are
    planned (the agents' KV-event residency, :func:`controlplane.core.residency.collapsed_keys`);
    logged with the nodes and counted. Returns the input and the demoted keys' total rate."""
    if active is None:
        return plan_input, 0.0
    reports = await stores.cluster.get_reports(plan_input.pool)
    collapsed = collapsed_keys((r.report for r in reports.values()), active.version)
    if not collapsed:
        return plan_input, 0.0
    hashes, old = plan_input.key_hashes.tolist(), plan_input.rates.tolist()
    rates, demoted, moved = demote(hashes, old, collapsed)
    if not demoted:
        return plan_input, 0.0
    labels = plan_input.key_labels
    log.info(
        "planned keys demoted: their prefix is no longer resident where they are planned",
        pool=plan_input.pool, from_version=active.version, keys=len(demoted), rate=moved,
        sample=[(labels.get(k, f"{k:016x}"), collapsed[k]) for k in demoted[:10]],
    )  # fmt: skip
    metrics.keys_demoted.labels(plan_input.pool).inc(len(demoted))
    return replace(plan_input, rates=np.asarray(rates, dtype=np.float64)), moved


async def _active_table(stores: Stores, pool: str) -> RoutingTable | None:
    """The pool's active plan, decoded (None when there is none or it cannot be read)."""
    active = await stores.plans.get_active(pool)
    if active is None or not active.version:
        return None
    data = await stores.plans.get_table_bytes(pool, active.version)
    if data is None:
        return None
    return await asyncio.to_thread(decode_table, data, verify_hash=False)


def replan_info(active: RoutingTable, result: Replan) -> table_pb2.ReplanInfo:
    return table_pb2.ReplanInfo(
        from_version=active.version,
        replanner="fresh" if result.used_fresh else "churn_aware",
        churn=result.churn,
        fresh_churn=result.fresh_churn,
        fresh_imbalance=result.fresh_imbalance,
        imbalance_bound=result.imbalance_bound,
        repair_moves=result.repair_moves,
        used_fresh=result.used_fresh,
        max_churn=result.max_churn or 0.0,
        bound_met=result.bound_met,
    )


def _plan(
    active: RoutingTable | None, plan_input: PlanInput, defaults: PlanDefaults, now_ms: int
) -> tuple[RoutingTable, table_pb2.ReplanInfo | None]:
    """Churn-aware against the active plan when there is one (and both are LPT), else fresh;
    the churn against the active plan is reported either way."""
    if active is None:
        return build_plan(plan_input, created_at_unix_ms=now_ms), None
    if defaults.churn_aware and plan_input.placement == "lpt" and active.params.placement == "lpt":
        result = replan(
            active, plan_input, tolerance=defaults.imbalance_tolerance,
            created_at_unix_ms=now_ms, max_churn=defaults.max_churn,
        )  # fmt: skip
        return result.table, replan_info(active, result)
    table = build_plan(plan_input, created_at_unix_ms=now_ms)
    fresh_churn = churn(active, table)
    info = table_pb2.ReplanInfo(
        from_version=active.version,
        replanner="fresh",
        churn=fresh_churn,
        fresh_churn=fresh_churn,
        fresh_imbalance=table.stats.planned_imbalance,
        imbalance_bound=table.stats.planned_imbalance,
        used_fresh=True,
        bound_met=True,
    )
    return table, info


async def build_live_plan(
    stores: Stores,
    request: BuildRequest,
    *,
    defaults: PlanDefaults,
    liveness: Liveness,
    metrics: ControlPlaneMetrics,
    trigger: str,
    now_ms: int,
) -> admin_pb2.PlanSummary:
    """Build from live rates and store (not activate); counts the run in the metrics."""
    started = time.perf_counter()
    try:
        pool = validate_pool(request.pool)
    except ValueError:
        pool = "invalid"  # a metric label, never an attacker-chosen string
    outcome = "error"
    try:
        plan_input, extra_tail = await _plan_input(stores, request, defaults, liveness, now_ms)
        active = await _active_table(stores, plan_input.pool)
        plan_input, demoted_rate = await demote_collapsed(stores, plan_input, active, metrics)
        extra_tail += demoted_rate
        table, info = await asyncio.to_thread(_plan, active, plan_input, defaults, now_ms)
        table = with_extra_tail(table, extra_tail)
        data = encode_table(table)
        meta = metadata_for(
            table,
            created_by=request.actor,
            source="live",
            note=request.note,
            table_bytes=len(data),
            now_ms=now_ms,
        )
        if info is not None:
            meta.replan.CopyFrom(info)
        result = await store_plan(stores, data, meta, action="build")
        outcome = "ok"
        return result
    except PreconditionError:
        outcome = "skipped"
        raise
    finally:
        metrics.planner_runs.labels(pool, trigger, outcome).inc()
        metrics.planner_seconds.labels(pool).observe(time.perf_counter() - started)
