"""``cachectl sim run | capacity | ablation`` end to end on a tiny workload, and flag errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachectl import sim_cmd
from cachectl.main import main
from sim import presets
from tests.support.tiny_workload import TinyWorkload


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sim_cmd, "load_workload", lambda args, preset: TinyWorkload())


SMALL = ["--workload", "tiny", "--nodes", "4", "--q-cap", "3"]


def test_run_prints_one_json_object_with_the_headline_metrics(
    tiny: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "run", *SMALL, "--policy", "cacheroute", "--qps", "20", "--duration", "20"]
    assert main([*argv, "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for field in ("requests", "kv_hit", "ttft_p50_s", "ttft_p99_s", "imbalance", "failures"):
        assert field in out
    assert out["requests"] > 0 and 0.0 < out["kv_hit"] < 1.0 and out["q_cap"] == 3.0


@pytest.mark.slow
def test_run_measures_q_cap_when_not_given(tiny: None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "run", "--workload", "tiny", "--nodes", "4", "--policy", "cacheroute"]
    assert main([*argv, "--qps", "20", "--duration", "20", "--seed", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "single-destination knee" in captured.err
    assert json.loads(captured.out)["q_cap"] > 0.5


@pytest.mark.slow
def test_capacity_writes_results_json_and_a_plot(
    tiny: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "cap.json", tmp_path / "cap.png"
    argv = ["sim", "capacity", *SMALL, "--policies", "flat,cacheroute", "--ladder", "10,20,400"]
    argv += ["--seeds", "1,2", "--duration", "30", "--jobs", "2"]
    assert main([*argv, "--ref-qps", "20", "--json", str(out), "--plot", str(png)]) == 0
    captured = capsys.readouterr()
    table = captured.out
    assert "cap@3.5s" in table and "cacheroute" in table
    for qps in ("10", "20", "400"):  # every rung's protocol is printed with the result
        assert f"@ {qps} QPS protocol: pre-warm" in table
    assert "6/6 tasks" in captured.err and "[####" in captured.err
    document: dict[str, Any] = json.loads(out.read_text())
    results = {r["policy"]: r for r in document["results"]}
    assert set(results) == {"flat", "cacheroute"}
    for result in results.values():
        assert set(result["capacity"]) == set(result["capacity_ci95"]) == {"3.5", "5"}
        assert "20" in result["p99_ttft_s"] and "censored" in result
        assert 0.0 <= result["kv_hit"] <= 1.0 and result["imbalance"] >= 1.0
        assert result["capacity"]["5"] == 20.0  # 400 QPS on 4 nodes diverges
    assert len(document["runs"]) == 2 * 3 * 2
    assert png.stat().st_size > 1000


def test_ablation_runs_the_four_mechanism_steps(
    tiny: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sim", "ablation", *SMALL, "--ladder", "10,20", "--seeds", "1", "--duration", "20"]
    assert main([*argv, "--jobs", "1"]) == 0
    table = capsys.readouterr().out
    for policy in ("flat", "affinity_only", "replicate_random", "cacheroute"):
        assert policy in table


RUN = ["run", "--policy", "flat", "--qps", "1", "--duration", "5", "--seed", "1"]
CAP = ["capacity", "--policies", "flat"]


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["run", "--policy", "nope", "--qps", "1", "--duration", "5", "--seed", "1"], "--policy"),
        (["run", "--policy", "flat", "--qps", "0", "--duration", "5", "--seed", "1"], "--qps"),
        ([*RUN[:5], "--duration", "-5", "--seed", "1"], "--duration"),
        ([*RUN, "--kv-blocks", "0"], "--kv-blocks"),
        ([*RUN, "--warmup", "9"], "--warmup"),
        ([*RUN, "--prewarm", "soon"], "--prewarm"),
        ([*RUN, "--prewarm", "-1"], "--prewarm"),
        (["capacity", "--policies", "flat,nope"], "--policies"),
        ([*CAP, "--ladder", "10,x"], "--ladder"),
        ([*CAP, "--ladder", "10,20", "--ref-qps", "15"], "--ref-qps"),
        ([*CAP, "--ladder", "10", "--slo", "0"], "--slo"),
        ([*CAP, "--ladder", "10", "--seeds", "a"], "--seeds"),
        (CAP, "--ladder"),  # tiny has no preset ladder
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    tiny: None, capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    argv = ["sim", extra[0], "--workload", "tiny", *extra[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cachectl: error: ") and flag in err


def test_unknown_workloads_and_options_are_flag_errors(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["sim", "run", "--policy", "flat", "--qps", "1", "--duration", "5", "--seed", "1"]
    assert main([*base, "--workload", "nope"]) == 2
    assert "--workload nope" in capsys.readouterr().err
    assert main([*base, "--workload", "paper", "--option", "colour=blue"]) == 2
    assert "colour" in capsys.readouterr().err
    assert main([*base, "--workload", "paper", "--option", "novalue"]) == 2
    assert "--option" in capsys.readouterr().err


class _CapturedError(Exception):
    """Raised by the stand-in study runner once it has seen the study's arguments."""


@pytest.mark.parametrize(
    ("workload", "profile", "ladder", "ref_qps"),
    [
        ("paper", "paper-testbed", presets.PAPER_LADDER, 100.0),
        ("paper", None, presets.PUBLIC_PAPER_LADDER, presets.PUBLIC_PAPER_REF_QPS),
        ("whales", None, presets.WHALES_LADDER, presets.WHALES_REF_QPS),
        ("lowshare", None, presets.LOWSHARE_LADDER, presets.LOWSHARE_REF_QPS),
    ],
)
def test_studies_run_without_ladder_on_the_preset_of_their_workload_and_profile(
    monkeypatch: pytest.MonkeyPatch,
    workload: str,
    profile: str | None,
    ladder: tuple[float, ...],
    ref_qps: float,
) -> None:
    seen: dict[str, Any] = {}

    def capture(*args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        raise _CapturedError

    monkeypatch.setattr(sim_cmd, "run_study", capture)
    argv = ["sim", "capacity", "--workload", workload, "--q-cap", "1", "--policies", "flat"]
    with pytest.raises(_CapturedError):
        main([*argv, *(["--profile", profile] if profile else [])])
    assert tuple(seen["ladder"]) == ladder
    assert ref_qps in ladder and presets.study_preset(workload, profile).ref_qps == ref_qps


def test_the_public_profile_ladder_climbs_past_the_testbed_ladder() -> None:
    assert max(presets.PUBLIC_PAPER_LADDER) >= 6 * max(presets.PAPER_LADDER)
    assert presets.WHALES_LADDER[0] == 30.0 and presets.WHALES_LADDER[-1] == 500.0


def test_gate_commands_keep_the_base_presets_loads() -> None:
    # drift and shadow read preset_for(workload) without a profile: the study ladders must not
    # move their default loads (paper 100 QPS; lowshare and whales: half of q_cap x R).
    assert presets.preset_for("paper").ref_qps == 100.0
    assert presets.preset_for("lowshare").ref_qps is None
    assert presets.preset_for("whales").ref_qps is None
    assert presets.preset_for("tiny", "paper-testbed") is presets.FALLBACK
