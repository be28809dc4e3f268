"""Which cluster-wide work the leader runs, and how often: the loop table of one instance.

Built once at start from the configuration (a loop that is off, e.g. ``--plan-interval 0``, is
not in the list); :mod:`controlplane.server.leader_loops` runs each entry while leading.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from cacheroute_state import Stores
from controlplane.cluster.fleet_windows import TICK_S as FLEET_TICK_S
from controlplane.cluster.fleet_windows import FleetWindowRecorder
from controlplane.cluster.key_rate_tracker import RateTracker
from controlplane.cluster.loads import LoadPublisher
from controlplane.cluster.nodes import Liveness
from controlplane.cluster.report_sweep import ReportSweeper
from controlplane.config import ControlPlaneConfig
from controlplane.core.report_expiry import sweep_interval_s
from controlplane.core.ttft_window import TtftWindows
from controlplane.lifecycle.auto_mode import AutoPilot
from controlplane.lifecycle.live_guard import LiveGuard
from controlplane.lifecycle.live_plan import PlanDefaults
from controlplane.lifecycle.retention import RETENTION_INTERVAL_S, prune_all
from controlplane.lifecycle.rollout_gates import RolloutGate
from controlplane.lifecycle.shadow import ShadowBudget
from controlplane.metrics import ControlPlaneMetrics
from servekit.clock import Clock

GUARD_INTERVAL_S = 1.0

Work = Callable[[int], Awaitable[object]]


def leader_work(
    cfg: ControlPlaneConfig,
    stores: Stores,
    *,
    metrics: ControlPlaneMetrics,
    liveness: Liveness,
    ttft: TtftWindows,
    clock: Clock,
    guard: LiveGuard,
    defaults: PlanDefaults,
    gates: Sequence[RolloutGate],
    budget: ShadowBudget,
    plan_all: Work,
) -> list[tuple[str, float, Work]]:
    """(name, interval in seconds, work(term)) of every loop this configuration runs, in order."""
    publisher = LoadPublisher(
        stores, metrics, liveness, grace_ms=round(cfg.leader_grace_s * 1000), ttft=ttft
    )
    tracker = RateTracker(
        stores,
        metrics,
        cfg.rate_half_life_s,
        cfg.rate_max_keys,
        ttft=ttft,  # the routers' TTFT, for engines that export none (llama.cpp)
        clock_ms=clock,
    )
    work: list[tuple[str, float, Work]] = [
        ("loads", cfg.load_publish_interval_s, lambda t: publisher.publish_all(t, clock())),
        ("rates", cfg.rate_update_interval_s, tracker.update),
    ]
    if cfg.report_retention_s > 0:
        retention_ms = round(cfg.report_retention_s * 1000)
        sweeper = ReportSweeper(stores, metrics, liveness, retention_ms)
        every_s = sweep_interval_s(cfg.report_retention_s, cfg.load_publish_interval_s)
        work.append(("report-sweep", every_s, lambda _t: sweeper.sweep_all(clock())))
    recorder = FleetWindowRecorder(stores, ttft)  # the fleet profile's observations
    work.append(("fleet-windows", FLEET_TICK_S, lambda _t: recorder.tick_all(clock())))
    if cfg.plan_interval_s > 0:
        work.append(("planner", cfg.plan_interval_s, plan_all))
    work.append(("guard", GUARD_INTERVAL_S, lambda _t: guard.tick(clock())))
    pilot = AutoPilot(
        stores,
        metrics,
        defaults=defaults,
        liveness=liveness,
        gates=gates,
        budget=budget,
        profile=cfg.shadow_profile,
    )
    work.append(("auto", cfg.auto_interval_s, lambda _t: pilot.round_all(clock())))
    if cfg.plan_retention > 0:
        keep = cfg.plan_retention
        work.append(
            ("retention", RETENTION_INTERVAL_S, lambda _t: prune_all(stores, keep, clock()))
        )
    return work
