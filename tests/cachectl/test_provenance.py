"""Study documents say which code produced them and when it started (issue 30's protocol)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from cachectl import provenance


def test_the_commit_and_start_time_are_recorded() -> None:
    started = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)
    record = provenance.provenance(started)
    assert record["started_at"] == "2026-12-03T22:00:00+00:00"
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown", record["git_commit"])
