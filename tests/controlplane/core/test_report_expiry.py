"""Which stored agent reports have expired (pure rules of the leader's report sweep)."""

from __future__ import annotations

from controlplane.core.report_expiry import (
    ExpiredReport,
    StoredReport,
    expired_reports,
    sweep_interval_s,
)

NOW = 1_700_000_000_000


def test_only_reports_older_than_the_retention_expire_with_their_age() -> None:
    reports = {
        "old": StoredReport(NOW - 10_001, timeout_ms=300),
        "edge": StoredReport(NOW - 10_000, timeout_ms=300),
        "fresh": StoredReport(NOW - 5, timeout_ms=300),
    }
    assert expired_reports(reports, NOW, 10_000) == [ExpiredReport("old", NOW - 10_001, 10_001)]


def test_a_node_that_could_still_be_up_keeps_its_report_past_the_retention() -> None:
    # Its agent reports once a minute: silent 90 s, it is not down yet (3 x 60 s).
    slow = {"slow": StoredReport(NOW - 90_000, timeout_ms=180_000)}
    assert expired_reports(slow, NOW, 10_000) == []
    assert [e.node_id for e in expired_reports(slow, NOW + 90_001, 10_000)] == ["slow"]


def test_retention_zero_keeps_every_report() -> None:
    assert expired_reports({"a": StoredReport(0, timeout_ms=1)}, NOW, 0) == []


def test_expired_reports_come_in_node_order() -> None:
    reports = {n: StoredReport(0, timeout_ms=1) for n in ("c", "a", "b")}
    assert [e.node_id for e in expired_reports(reports, NOW, 1)] == ["a", "b", "c"]


def test_sweep_interval_is_a_tenth_of_the_retention_within_tick_and_a_minute() -> None:
    assert sweep_interval_s(600, 0.25) == 60
    assert sweep_interval_s(3600, 0.25) == 60
    assert sweep_interval_s(100, 0.25) == 10
    assert sweep_interval_s(1, 0.25) == 0.25
