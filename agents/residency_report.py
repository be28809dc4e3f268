"""The ``residency`` section of a NodeReport, from one engine's KV-event subscriber.

Rates are deltas of the subscriber's counters between two reports divided by the time between
them (the first report after the first batch has no interval and reports 0). Nothing is added
until the subscriber has applied a batch: an engine that publishes no events leaves the report
exactly as it was without a subscriber. The agent's own metrics follow the same counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agents.agent_metrics import NodeMetrics
from agents.kv_subscriber import KvEventSubscriber
from agents.residency import ResidencyCounts
from cacheroute.v1 import agent_pb2


class ResidencyReporter:
    """Turns subscriber counters into report sections and metric values (module docstring)."""

    def __init__(
        self,
        subscriber: KvEventSubscriber,
        metrics: NodeMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.subscriber = subscriber
        self._metrics = metrics
        self._clock = clock
        self._last: tuple[float, ResidencyCounts] | None = None

    def section(self) -> agent_pb2.KvResidency | None:
        sub = self.subscriber
        if not sub.seen:
            return None
        now, counts = self._clock(), sub.residency.counts()
        evictions = stores = 0.0
        if self._last is not None:
            then, before = self._last
            dt = now - then
            if dt > 0:
                # a counter never goes down here (a restart clears blocks, not counters)
                evictions = max(0, counts.removed - before.removed) / dt
                stores = max(0, counts.stored - before.stored) / dt
        self._last = (now, counts)
        dropped = sum(sub.dropped.values())
        if self._metrics is not None:
            self._metrics.kv_events(counts.resident, sub.batches, sub.gaps_unrecovered, dropped)
        return agent_pb2.KvResidency(
            resident_blocks=counts.resident,
            evictions_per_s=evictions,
            stores_per_s=stores,
            batches=sub.batches,
            gaps=sub.gaps,
            gaps_unrecovered=sub.gaps_unrecovered,
            dropped_frames=dropped,
            restarts=sub.restarts,
            overflow_blocks=counts.overflow,
        )
