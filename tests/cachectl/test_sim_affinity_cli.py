"""``cachectl sim run --affinity``: the same run as without (same stream, plan and metrics), plus
the delivered-affinity numbers, on the tiny workload."""

from __future__ import annotations

import json

import pytest

from cachectl import sim_cmd
from cachectl.main import main
from tests.support.tiny_workload import TinyWorkload

ARGV = ["sim", "run", "--workload", "tiny", "--nodes", "4", "--q-cap", "3", "--policy"]


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_cmd, "load_workload", lambda args, preset: TinyWorkload())


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["cacheroute", "sglang"])
def test_affinity_adds_its_numbers_to_the_same_run(
    tiny: None, capsys: pytest.CaptureFixture[str], policy: str
) -> None:
    argv = [*ARGV, policy, "--qps", "20", "--duration", "20", "--seed", "1", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*argv, "--affinity"]) == 0
    with_affinity = json.loads(capsys.readouterr().out)
    for field in ("requests", "kv_hit", "ttft_p99_s", "imbalance", "cached_tokens"):
        assert with_affinity[field] == plain[field]
    affinity = with_affinity["affinity"]
    assert set(affinity) == {
        "followups", "followup_cached_fraction", "followups_on_first_node", "reusable_tokens",
        "delivered_tokens", "load_cov",
    }  # fmt: skip
    assert affinity["load_cov"] >= 0
    assert main([*argv[:-1], "--affinity"]) == 0
    assert "delivered affinity:" in capsys.readouterr().out
