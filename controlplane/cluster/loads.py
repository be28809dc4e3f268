"""The leader's load-snapshot publisher: one ``LoadSnapshot`` per pool per interval.

A snapshot lists every registered node with its derived state (:func:`controlplane.cluster.nodes.
node_status`): agent nodes carry running + waiting from their latest report and are healthy only
when that report is healthy, not stale and fresh; static nodes are healthy with load 0; draining
comes from the registry. ``seq`` continues from the stored snapshot when leadership changes, so it
only grows. ``observed_at`` is the oldest time at which a healthy agent node's load was scraped,
estimated on the control plane's clock as ``received_at − (sent_at − scraped_at)`` (only the
agent's own clock differences are used); with no such node it is the publish time. Routers keep
the decisions they made after it as their in-flight correction.

Leadership changes: each new term of this instance reads the stored snapshot once per pool and
publishes under ``leader_term`` = the stored one + 1 (routers order snapshots by ``(leader_term,
seq)``, never by wall time). A stored term or seq at or above :data:`MAX_ORDER` (2^62; the wire's
uint64 would overflow at 2^64 - 1) is corrupt: the new leader starts a fresh epoch at term 1,
logged once. For ``grace_ms`` after it became leader, a node that the previous snapshot showed
healthy is not marked down for *missing* reports: its agent may still be reconnecting to this
instance (a leave, a stale report or a node already down stays as it is).

With ``ttft`` the publisher also feeds each report's TTFT histogram into the leader's windows
(:mod:`controlplane.core.ttft_window`): it reads every report anyway, four times a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from cacheroute.v1 import admin_pb2, cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ReportRecord
from controlplane.cluster.nodes import Liveness, node_status
from controlplane.core.node_states import state_of
from controlplane.core.ttft_window import Buckets, TtftWindows
from controlplane.metrics import NODE_STATES, ControlPlaneMetrics
from dataplane.core.load_columns import encode_columns

log = structlog.get_logger("controlplane.cluster.loads")
# Terms and sequence numbers are uint64 on the wire; no real run comes near 2^62 (a new term per
# leadership change, 4 snapshots a second), so a stored value above it is corrupt or forged.
MAX_ORDER = 2**62


def observed_at(
    statuses: list[admin_pb2.NodeStatus], reports: dict[str, ReportRecord], now_ms: int
) -> int:
    """When the snapshot's loads were observed (module docstring)."""
    times = []
    for status in statuses:
        report = reports.get(status.record.node_id)
        if status.record.static or not status.load.healthy or report is None:
            continue
        r = report.report
        lag = max(0, r.sent_at_unix_ms - r.scraped_at_unix_ms) if r.scraped_at_unix_ms else 0
        times.append(report.received_at_unix_ms - lag)
    return min(times, default=now_ms)


def feed_ttft(
    windows: TtftWindows,
    pool: str,
    reports: Mapping[str, ReportRecord],
    registered: Sequence[str] = (),
) -> None:
    """Each report's TTFT histogram into the pool's windows, stamped with its receive time (a
    report read again adds nothing; nodes neither reporting nor registered are forgotten, with
    the routers' readings of them)."""
    for node_id, record in reports.items():
        if record.report.HasField("ttft"):
            h = record.report.ttft
            reading = Buckets(tuple(h.upper_bounds), tuple(h.counts), h.count)
            windows.observe(pool, node_id, record.received_at_unix_ms, reading)
    windows.forget(pool, keep=[*reports, *registered])


def record_residency(
    m: ControlPlaneMetrics,
    pool: str,
    statuses: list[admin_pb2.NodeStatus],
    labelled: dict[str, set[str]],
) -> None:
    """Residency gauges of the nodes that report KV events; others' children are removed."""
    nodes = set()
    for status in statuses:
        load = status.load
        if not load.HasField("resident_blocks"):
            continue
        node = status.record.node_id
        nodes.add(node)
        m.node_resident_blocks.labels(pool, node).set(load.resident_blocks)
        m.node_eviction_pressure.labels(pool, node).set(load.eviction_pressure)
        m.node_keys_not_resident.labels(pool, node).set(status.planned_keys_not_resident)
    for gone in labelled.get(pool, set()) - nodes:
        for gauge in (m.node_resident_blocks, m.node_eviction_pressure, m.node_keys_not_resident):
            gauge.remove(pool, gone)
    labelled[pool] = nodes


class LoadPublisher:
    def __init__(
        self,
        stores: Stores,
        metrics: ControlPlaneMetrics,
        liveness: Liveness,
        *,
        grace_ms: int = 0,
        ttft: TtftWindows | None = None,
    ) -> None:
        self._ttft = ttft
        self._stores = stores
        self._metrics = metrics
        self._liveness = liveness
        self._grace_ms = grace_ms
        self._term = -1
        self._grace_until_ms = 0
        self._seq: dict[str, int] = {}
        self._leader_term: dict[str, int] = {}
        self._grace_nodes: dict[str, frozenset[str]] = {}  # healthy in the previous snapshot
        self._labelled: dict[str, set[str]] = {}  # pool -> nodes with per-node gauges
        self._kv_labelled: dict[str, set[str]] = {}  # pool -> nodes with residency gauges

    async def publish_all(self, term: int, now_ms: int) -> list[cluster_pb2.LoadSnapshot]:
        if term != self._term:
            self._seq.clear()
            self._leader_term.clear()
            self._grace_nodes.clear()
            self._term = term
            self._grace_until_ms = now_ms + self._grace_ms
        return [await self.publish(pool, now_ms) for pool in await self._stores.plans.pools()]

    async def _start_term(self, pool: str) -> None:
        previous = await self._stores.cluster.get_load(pool)
        if previous is not None and max(previous.leader_term, previous.seq) >= MAX_ORDER:
            # +1 would overflow on every tick ("Value out of range"): start a fresh epoch; the
            # routers follow the store once the forged snapshot they hold is old.
            log.warning(
                "stored load snapshot has an impossible term or seq; starting a fresh epoch",
                pool=pool, leader_term=previous.leader_term, seq=previous.seq,
            )  # fmt: skip
            previous.leader_term, previous.seq = 0, 0
        self._seq[pool] = previous.seq if previous is not None else 0
        self._leader_term[pool] = (previous.leader_term if previous is not None else 0) + 1
        self._grace_nodes[pool] = frozenset(
            n.node_id for n in (previous.nodes if previous is not None else ()) if n.healthy
        )

    async def publish(self, pool: str, now_ms: int) -> cluster_pb2.LoadSnapshot:
        records = await self._stores.cluster.get_nodes(pool)
        reports = await self._stores.cluster.get_reports(pool)
        if self._ttft is not None:
            feed_ttft(self._ttft, pool, reports, [r.node_id for r in records])
        if pool not in self._seq:
            await self._start_term(pool)
        grace = self._grace_nodes[pool] if now_ms < self._grace_until_ms else frozenset()
        statuses = [
            node_status(
                r, reports.get(r.node_id), now_ms, self._liveness, in_grace=r.node_id in grace
            )
            for r in records
        ]
        self._seq[pool] += 1
        nodes = [s.load for s in statuses]
        snapshot = cluster_pb2.LoadSnapshot(
            pool=pool,
            seq=self._seq[pool],
            observed_at_unix_ms=observed_at(statuses, reports, now_ms),
            nodes=nodes,
            leader_term=self._leader_term[pool],
            columns=encode_columns(nodes),  # routers apply these in one numpy pass
        )
        await self._stores.cluster.publish_load(snapshot)
        self._record(pool, statuses)
        return snapshot

    def _record(self, pool: str, statuses: list[admin_pb2.NodeStatus]) -> None:
        m = self._metrics
        m.snapshots.labels(pool).inc()
        counts = dict.fromkeys(NODE_STATES, 0)
        for status in statuses:
            counts[state_of(status)] += 1
        for state, count in counts.items():
            m.nodes.labels(pool, state).set(count)
        nodes = set()
        for status in statuses:
            node = status.record.node_id
            nodes.add(node)
            m.node_load.labels(pool, node).set(status.load.load)
            m.node_report_age.labels(pool, node).set(max(0, status.last_report_age_ms) / 1000.0)
        for gone in self._labelled.get(pool, set()) - nodes:
            m.node_load.remove(pool, gone)
            m.node_report_age.remove(pool, gone)
        record_residency(m, pool, statuses, self._kv_labelled)
        self._labelled[pool] = nodes
