"""The leader's work: run a piece of cluster-wide work at a fixed rate while this instance leads.

Every instance starts the same loops (:class:`~controlplane.server.process.ControlPlane` wires
them); each skips its tick while the instance does not hold the lease, so a new leader takes over
the work without a restart. A failing tick is counted and logged, never fatal to the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from cacheroute_state import Stores
from cacheroute_state.interfaces import CorruptRecordError, StoreUnavailableError
from controlplane.cluster.leader import LeaderElector
from controlplane.cluster.nodes import Liveness
from controlplane.errors import PreconditionError
from controlplane.lifecycle.live_plan import BuildRequest, PlanDefaults, build_live_plan
from controlplane.metrics import ControlPlaneMetrics
from servekit.clock import Clock

log = structlog.get_logger("controlplane")


async def run_while_leading(
    leader: LeaderElector,
    metrics: ControlPlaneMetrics,
    name: str,
    interval_s: float,
    work: Callable[[int], Awaitable[object]],
    stopping: Callable[[], bool],
) -> None:
    """Run ``work(term)`` every ``interval_s`` while this instance leads (fixed rate)."""
    next_at = time.monotonic()
    while not stopping():
        if leader.is_leader:
            try:
                await work(leader.term)
            except (StoreUnavailableError, CorruptRecordError) as exc:  # no traceback a tick
                metrics.loop_errors.labels(name).inc()
                log.warning("leader loop failed", loop=name, error=str(exc))
            except Exception:
                metrics.loop_errors.labels(name).inc()
                log.exception("leader loop failed", loop=name)
        next_at = max(next_at + interval_s, time.monotonic())
        await asyncio.sleep(next_at - time.monotonic())


async def plan_all(
    stores: Stores,
    *,
    defaults: PlanDefaults,
    liveness: Liveness,
    metrics: ControlPlaneMetrics,
    clock: Clock,
) -> None:
    """The periodic planner's tick: build and store a plan for every pool that can have one."""
    for pool in await stores.plans.pools():
        request = BuildRequest(pool=pool, actor="planner", note="periodic build")
        try:
            built = await build_live_plan(
                stores,
                request,
                defaults=defaults,
                liveness=liveness,
                metrics=metrics,
                trigger="interval",
                now_ms=clock(),
            )
        except PreconditionError as exc:
            log.debug("periodic plan skipped", pool=pool, reason=str(exc))
            continue
        log.info("periodic plan stored", pool=pool, version=built.metadata.version)
