"""The router's traffic reports: per-key counts (:mod:`dataplane.core.heavy_hitters`) to Redis.

Every ``report_interval`` the :class:`TrafficReporter` closes each pool's window (the serving
thread only swaps in a fresh summary), builds the ``TrafficReport`` on a worker thread and appends
it to the pool's traffic stream; when Redis is away the report is
dropped and counted, so nothing grows while it is gone. With ``node_ttft`` each report also
carries the TTFT the router measured per destination node of that pool since its previous report
(:mod:`dataplane.telemetry.node_ttft`); a pool that routed nothing in the window but has answers
timed since gets a report with those alone, so the last answers of a burst are not held back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

import structlog

from cacheroute.v1 import cluster_pb2
from cacheroute_state.interfaces import StoreUnavailableError, TelemetryStore
from dataplane.core.heavy_hitters import TrafficCounter, Window
from dataplane.telemetry.node_ttft import NodeTtftCounts
from servekit.gil import fast_switched

log = structlog.get_logger("dataplane.telemetry.traffic")


class TrafficReporter:
    """Drains every pool's counter each ``interval_s`` and appends the reports to Redis."""

    def __init__(
        self,
        telemetry: TelemetryStore,
        counters: Callable[[], Iterable[tuple[str, TrafficCounter]]],
        *,
        router_id: str,
        interval_s: float,
        on_dropped: Callable[[int], None],
        node_ttft: NodeTtftCounts | None = None,
    ) -> None:
        self._telemetry = telemetry
        self._node_ttft = node_ttft
        self._counters = counters
        self._router_id = router_id
        self.interval_s = interval_s
        self._on_dropped = on_dropped
        self.sent = 0

    async def flush(self, timeout_s: float | None = None) -> None:
        now_ms = int(time.time() * 1000)
        windows: list[tuple[str, Window | None]] = []
        for pool, counter in self._counters():
            window = counter.close_window(now_ms)
            if window is not None or (self._node_ttft and self._node_ttft.pending(pool)):
                windows.append((pool, window))
        # Sorting 4,096 keys into a protobuf takes a few ms: a worker thread does it, so the
        # serving thread only waits for the GIL in 0.5 ms slices, not for the whole build.
        reports = await asyncio.to_thread(fast_switched, self._reports, windows, now_ms)
        for index, report in enumerate(reports):
            try:
                async with asyncio.timeout(timeout_s or self.interval_s):
                    await self._telemetry.add_traffic(report)
            except (StoreUnavailableError, TimeoutError) as exc:
                self._on_dropped(len(reports) - index)
                log.debug("traffic report dropped", reason=str(exc), reports=len(reports) - index)
                return
            self.sent += 1

    def _reports(
        self, windows: list[tuple[str, Window | None]], now_ms: int
    ) -> list[cluster_pb2.TrafficReport]:
        reports = []
        for pool, window in windows:
            if window is not None:
                report = window.report(self._router_id, pool)
            else:  # answers timed, nothing routed: the TTFT alone
                report = cluster_pb2.TrafficReport(
                    router_id=self._router_id, pool=pool, window_start_unix_ms=now_ms,
                    window_end_unix_ms=now_ms,
                )  # fmt: skip
            if self._node_ttft is not None:
                report.node_ttft.extend(self._node_ttft.take(pool))
            reports.append(report)
        return reports

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.flush()
