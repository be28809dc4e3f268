"""Passive health in the router process: outcomes in, ejections out, metrics and log lines.

The HTTP front reports every engine attempt (``Release`` with an ``outcome`` does the same for
``Route`` callers); the decision logic is :mod:`dataplane.core.outliers`, per pool, inside the
router. This module adds the clock (``time.monotonic``: ejection times must not jump with the
wall clock), one log line per ejection and per return, the metrics, and the loop that lets
ejected destinations back when their time is up (they get no traffic to report on meanwhile).

Metrics: ``cacheroute_router_outlier_ejections_total{pool,node}``,
``cacheroute_router_outlier_returns_total{pool,node}``, ``cacheroute_router_outlier_ejected{pool}``
(ejected now) and ``cacheroute_router_outlier_overflows_total{pool}`` (ejections refused by the
max-ejected share).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import structlog
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataplane.core.outliers import report_outcome, return_due
from dataplane.core.router import Router

log = structlog.get_logger("dataplane.health.passive_health")
RETURN_INTERVAL_S = 0.25


class PassiveHealth:
    """Reports attempt outcomes to the router's detectors (module docstring)."""

    def __init__(
        self, router: Router, registry: CollectorRegistry, interval_s: float = RETURN_INTERVAL_S
    ) -> None:
        self.router = router
        self.interval_s = interval_s
        self.enabled = router.outlier_config.enabled
        self.ejections = Counter(
            "cacheroute_router_outlier_ejections",
            "Destinations ejected by passive health (consecutive failed attempts).",
            ["pool", "node"],
            registry=registry,
        )
        self.returns = Counter(
            "cacheroute_router_outlier_returns",
            "Ejected destinations let back when their ejection time was up (on probation).",
            ["pool", "node"],
            registry=registry,
        )
        registry.register(_OutlierCollector(router))

    def succeeded(self, pool: str, node_id: str) -> None:
        state = self.router.pools.get(pool)
        if self.enabled and state is not None:
            state.outliers.success(node_id)

    def failed(self, pool: str, node_id: str, cause: str) -> None:
        state = self.router.pools.get(pool)
        if not self.enabled or state is None:
            return
        overflows = state.outliers.overflows
        ejection = report_outcome(state.outliers, state.view, node_id, False, time.monotonic())
        if ejection is not None:
            self.ejections.labels(pool, node_id).inc()
            log.warning(
                "destination ejected",
                pool=pool,
                node=node_id,
                cause=cause,
                consecutive_failures=ejection.failures,
                ejection_s=ejection.duration_s,
                ejections=ejection.ejections,
            )
        elif state.outliers.overflows > overflows:
            log.warning(
                "destination not ejected: max ejected share reached",
                pool=pool,
                node=node_id,
                cause=cause,
                ejected=sorted(state.outliers.ejected),
            )

    def return_due(self) -> list[tuple[str, str]]:
        """Let back every destination whose ejection is over; (pool, node id) of each."""
        now = time.monotonic()
        back = []
        for pool, state in self.router.pools.items():
            for node_id in return_due(state.outliers, state.view, now):
                self.returns.labels(pool, node_id).inc()
                log.info("ejected destination returned", pool=pool, node=node_id)
                back.append((pool, node_id))
        return back

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.return_due()


class _OutlierCollector(Collector):
    """Ejected-now gauge and overflow counter per pool, read from the detectors at scrape."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def collect(self) -> Iterator[Metric]:
        ejected = GaugeMetricFamily(
            "cacheroute_router_outlier_ejected",
            "Destinations currently ejected by passive health, per pool.",
            labels=["pool"],
        )
        overflows = CounterMetricFamily(
            "cacheroute_router_outlier_overflows",
            "Ejections refused because the pool's max ejected share was reached.",
            labels=["pool"],
        )
        for name, state in sorted(self._router.pools.items()):
            ejected.add_metric([name], len(state.outliers.ejected))
            overflows.add_metric([name], state.outliers.overflows)
        yield ejected
        yield overflows
