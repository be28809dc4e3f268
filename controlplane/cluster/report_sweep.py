"""The leader's report sweep: forget stored agent reports past their retention.

Which reports have expired is decided by :mod:`controlplane.core.report_expiry`; this adapter reads
each pool's reports, removes the expired ones with a compare-and-delete (``expire_report``: a
report that arrived after the read survives), logs each removal once with the node id and age, and
counts it in ``cacheroute_controlplane_reports_expired_total{pool}``. The node's registry record
stays: with no report the node is listed down ("never reported") until an operator removes it or
its agent comes back.
"""

from __future__ import annotations

import structlog

from cacheroute_state import Stores
from controlplane.cluster.nodes import Liveness
from controlplane.core.report_expiry import ExpiredReport, StoredReport, expired_reports
from controlplane.metrics import ControlPlaneMetrics

log = structlog.get_logger("controlplane.cluster.report_sweep")


class ReportSweeper:
    def __init__(
        self, stores: Stores, metrics: ControlPlaneMetrics, liveness: Liveness, retention_ms: int
    ) -> None:
        self._stores = stores
        self._metrics = metrics
        self._liveness = liveness
        self._retention_ms = retention_ms

    async def sweep_all(self, now_ms: int) -> list[ExpiredReport]:
        """One sweep of every pool; returns what it removed."""
        removed: list[ExpiredReport] = []
        for pool in await self._stores.plans.pools():
            removed += await self.sweep(pool, now_ms)
        return removed

    async def sweep(self, pool: str, now_ms: int) -> list[ExpiredReport]:
        reports = await self._stores.cluster.get_reports(pool)
        stored = {
            node: StoredReport(
                record.received_at_unix_ms,
                self._liveness.timeout_ms(record.report.report_interval_ms),
            )
            for node, record in reports.items()
        }
        removed = []
        for expired in expired_reports(stored, now_ms, self._retention_ms):
            if not await self._stores.cluster.expire_report(
                pool, expired.node_id, expired.received_at_ms
            ):
                continue  # a fresh report arrived meanwhile, or another sweep was first
            removed.append(expired)
            self._metrics.reports_expired.labels(pool).inc()
            log.info(
                "stored agent report expired",
                pool=pool, node_id=expired.node_id, age_s=round(expired.age_ms / 1000, 1),
                retention_s=self._retention_ms / 1000,
            )  # fmt: skip
        return removed
