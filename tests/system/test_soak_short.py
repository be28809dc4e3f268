"""The soak benchmark's CI mode: 20 s of steady Route load and OpenAI chat completions through the
router's HTTP front (the real ``openai`` client, streamed and not), with a rollout every 3 s, all
real processes (bench/bench_soak.py). The claim checked here is the one that is not about speed:
not one Route call and not one HTTP request fails while plans roll out and snapshots flow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow,
              pytest.mark.timeout(180)]  # fmt: skip

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_soak.py"


def test_the_short_soak_fails_no_route_call_or_http_request_during_rollouts(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--ci", "--json", str(out), "--log-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["errors"] == 0
    assert result["calls"] > 1000
    assert result["http_errors"] == 0, result["first_http_errors"]
    assert result["http_calls"] > 50  # 10/s for 20 s: HTTP traffic was sent, not skipped
    assert all(b["http_calls"] > 0 for b in result["buckets"])
    assert result["rollouts"] >= 3, result["rollout_errors"]
