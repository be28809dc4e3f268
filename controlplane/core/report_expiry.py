"""Which stored agent reports have expired: the pure half of the leader's report sweep.

An agent that leaves says so and its report is removed; one that crashes or is cut off never does,
and its last report would stay in the store forever, read again by every snapshot. The leader
therefore forgets a report once it is older than the retention (``--report-retention``, 600 s by
default, 0: never). A report is never expired while its node could still count as up: the
effective retention is at least the node's own liveness timeout (``--node-timeout-intervals`` x
its report interval), so a long-interval agent is down before its report goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_RETENTION_S = 600.0


@dataclass(frozen=True)
class StoredReport:
    """What the sweep needs of one stored report: when it arrived, and how long its node may be
    silent before it is down."""

    received_at_ms: int
    timeout_ms: float


@dataclass(frozen=True)
class ExpiredReport:
    node_id: str
    received_at_ms: int
    age_ms: int


def expired_reports(
    reports: Mapping[str, StoredReport], now_ms: int, retention_ms: int
) -> list[ExpiredReport]:
    """The reports older than ``retention_ms`` and than their node's timeout, by node id;
    none while ``retention_ms`` is 0 (retention off)."""
    if retention_ms <= 0:
        return []
    expired = []
    for node_id in sorted(reports):
        report = reports[node_id]
        age = now_ms - report.received_at_ms
        if age > max(retention_ms, report.timeout_ms):
            expired.append(ExpiredReport(node_id, report.received_at_ms, age))
    return expired


def sweep_interval_s(retention_s: float, tick_s: float) -> float:
    """How often the leader sweeps: a tenth of the retention (a report outlives it by at most
    10%), at most once a minute, never more often than the load-snapshot tick."""
    return max(tick_s, min(60.0, retention_s / 10))
