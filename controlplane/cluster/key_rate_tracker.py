"""The rate estimator's I/O: fold the Redis traffic stream in, persist the state, read it back.

The leader runs :meth:`RateTracker.update` every ``--rate-update-interval``: per pool it reads the
traffic reports after the saved cursor, folds them in, prunes and saves the state (with the new
cursor) in one write, so a restarted or newly elected leader resumes exactly where the state was
saved. Any instance answering BuildPlan uses :func:`current_rates`: the saved state plus the
reports that arrived since, without saving. With ``ttft`` the leader's tracker also hands the
reports' per-node TTFT (the routers' own measurement) to the TTFT windows
(:mod:`controlplane.cluster.router_ttft`).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.cluster.router_ttft import feed_router_ttft
from controlplane.core.rates import RateEstimator, RateSnapshot, RateStateError
from controlplane.core.ttft_window import TtftWindows
from controlplane.metrics import ControlPlaneMetrics

READ_BATCH = 1000
log = structlog.get_logger("controlplane.core.rates")


async def load_estimator(
    stores: Stores, pool: str, half_life_s: float, max_keys: int
) -> RateEstimator:
    """The pool's saved estimator, or a fresh one (also when the saved state is unreadable)."""
    data = await stores.telemetry.load_rates(pool)
    if data is not None:
        try:
            return RateEstimator.from_bytes(data, half_life_s, max_keys=max_keys)
        except RateStateError as exc:
            log.warning("discarding saved rate state", pool=pool, error=str(exc))
    return RateEstimator(half_life_s, max_keys=max_keys)


async def catch_up(
    stores: Stores,
    estimator: RateEstimator,
    pool: str,
    on_reports: Callable[[list[cluster_pb2.TrafficReport]], object] | None = None,
) -> int:
    """Fold in every traffic report after the estimator's cursor; returns how many."""
    folded = 0
    while True:
        cursor, reports = await stores.telemetry.read_traffic(pool, estimator.cursor, READ_BATCH)
        for report in reports:
            estimator.observe(report)
        if on_reports is not None and reports:
            on_reports(reports)
        folded += len(reports)
        estimator.cursor = cursor
        if len(reports) < READ_BATCH:
            return folded


async def current_rates(
    stores: Stores, pool: str, half_life_s: float, max_keys: int
) -> RateSnapshot:
    """Up-to-date rates of a pool, on any instance (does not write)."""
    estimator = await load_estimator(stores, pool, half_life_s, max_keys)
    await catch_up(stores, estimator, pool)
    return estimator.snapshot()


class RateTracker:
    """The leader's estimators, one per pool, reloaded from Redis whenever leadership changes."""

    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        half_life_s: float,
        max_keys: int,
        *,
        ttft: TtftWindows | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._stores = stores
        self._ttft = ttft
        self._clock_ms = clock_ms
        self._metrics = metrics
        self._half_life_s = half_life_s
        self._max_keys = max_keys
        self._term = -1
        self._estimators: dict[str, RateEstimator] = {}

    async def update(self, term: int) -> None:
        if term != self._term:  # another leader may have advanced the state meanwhile
            self._estimators.clear()
            self._term = term
        for pool in await self._stores.plans.pools():
            await self._update_pool(pool)

    async def _update_pool(self, pool: str) -> None:
        estimator = self._estimators.get(pool)
        if estimator is None:
            estimator = await load_estimator(self._stores, pool, self._half_life_s, self._max_keys)
            self._estimators[pool] = estimator
        folded = await catch_up(self._stores, estimator, pool, self._ttft_feeder(pool))
        if folded:
            estimator.prune()
            await self._stores.telemetry.save_rates(pool, estimator.to_bytes())
            self._metrics.traffic_reports.labels(pool).inc(folded)
        self._metrics.rate_keys.labels(pool).set(estimator.num_keys)
        self._metrics.rate_total.labels(pool).set(estimator.total_rate())

    def _ttft_feeder(self, pool: str) -> Callable[[list[cluster_pb2.TrafficReport]], object] | None:
        windows, clock = self._ttft, self._clock_ms
        if windows is None or clock is None:
            return None
        return lambda reports: feed_router_ttft(windows, pool, reports, clock())
