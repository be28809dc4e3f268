"""The ``residency`` section of a NodeReport, from one engine's KV-event subscriber.

Rates are deltas of the subscriber's counters between two reports divided by the time between
them (the first report after the first batch has no interval and reports 0). Nothing is added
until the subscriber has applied a batch: an engine that publishes no events leaves the report
exactly as it was without a subscriber. The agent's own metrics follow the same counters. With
a watch from the control plane (the active plan's keys on this node and each key's anchor block),
the section lists the watched keys whose anchor is not resident, but only once some watched
anchor has been resident: the anchors are the routers' block hashes, and an engine that names its
blocks otherwise (vLLM and SGLang hash token ids) would otherwise report every planned key
absent and have them all demoted. Such an engine's reports carry no answer, and nothing is
demoted; its node-level numbers stand.
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
        self.names_match = False  # a watched anchor was resident once: the hashes agree

    def section(
        self, watch: tuple[str, tuple[tuple[int, int], ...]] | None = None
    ) -> agent_pb2.KvResidency | None:
        """The report's section, answering ``watch`` (plan version, (key, anchor) pairs): the
        keys whose anchor block is not resident; None before the first batch."""
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
        section = agent_pb2.KvResidency(
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
        if watch is not None:
            version, pairs = watch
            absent = [k for k, anchor in pairs if anchor not in sub.residency]
            self.names_match = self.names_match or len(absent) < len(pairs)
            if self.names_match:
                section.watch_version = version
                section.watched_keys = len(pairs)
                section.absent_keys.extend(absent)
        return section
