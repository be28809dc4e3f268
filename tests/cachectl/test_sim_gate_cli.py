"""``cachectl sim drift`` (and ``sim shadow``) end to end on small settings, and flag errors."""

from __future__ import annotations

import json

import pytest

from cachectl.main import main

DRIFT = ["sim", "drift", "--workload", "paper", "--nodes", "8", "--top-k", "32", "--qps", "30",
         "--q-cap", "12", "--interval", "40", "--plan-window", "20", "--dip-window", "10",
         "--steps", "2"]  # fmt: skip


def test_drift_json_is_the_issues_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*DRIFT, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["transitions"]) == 2
    for row in document["transitions"]:
        for arm in ("fresh", "churn_aware"):
            assert set(row[arm]) == {"churn", "hit_dip", "p99_s", "imbalance"}
    assert document["settings"]["q_cap"] == 12.0 and document["settings"]["nodes"] == 8


def test_drift_prints_a_table_and_the_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(DRIFT) == 0
    out = capsys.readouterr().out
    assert "REPLANNER" in out and "churn_aware" in out
    assert "smaller_hit_dip_than_fresh:" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workload", "whales"], "--workload"),
        (["--top-k", "0"], "--top-k"),
        (["--dip-window", "70"], "dip_window_s"),  # a plan window may now exceed the interval
    ],
)
def test_drift_flag_errors_name_the_flag(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*DRIFT, *extra]) == 2
    assert message in capsys.readouterr().err
