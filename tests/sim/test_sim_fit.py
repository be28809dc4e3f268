"""The frozen paper-testbed calibration re-runs on a small budget and lands on its values.

Everything in the fit is deterministic per seed, so re-running parts of it must reproduce the
frozen numbers exactly (stage A's hit rates, stage B's p99 at one rung, the offset choice).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sim import fit
from sim.engine_model import PAPER_TESTBED_FILE, PROFILES, paper_testbed

FROZEN: dict[str, Any] = json.loads(PAPER_TESTBED_FILE.read_text())


def _point() -> fit.WorkloadPoint:
    return fit.WorkloadPoint(**FROZEN["workload"])


@pytest.mark.slow
def test_stage_a_rescored_on_its_budget_gives_the_frozen_flat_hit_rates() -> None:
    again = fit.score_workload(_point(), horizon_s=float(FROZEN["budget"]["horizon_s"]))
    assert again.hits == pytest.approx(FROZEN["workload_fit"]["hits"], abs=1e-9)


def test_the_frozen_workload_keeps_the_1_2k_prompt_budget() -> None:
    assert fit.with_budget(fit.WorkloadPoint(**(FROZEN["workload"] | {"rag_tokens": 0}))) == (
        _point()
    )


def test_stage_b_offset_choice_is_reproduced_from_the_frozen_p99_table() -> None:
    engine = FROZEN["engine"]
    scores = []
    for factor, table in FROZEN["flat_p99_without_offset"].items():
        p99s = {}
        for cell, value in table.items():
            seed, qps = cell.split("@")
            p99s[(int(seed), float(qps))] = (value[0], value[1], bool(value[2]))
        scores += fit.score_offsets(float(factor), p99s, fit.offset_grid())
    feasible = [s for s in scores if s.fits]
    chosen = min(feasible or scores, key=lambda s: s.distance)
    assert (chosen.factor, round(chosen.offset_s * 1000, 1)) == (
        engine["slowdown"],
        engine["ttft_offset_ms"],
    )


@pytest.mark.slow
def test_one_stage_b_run_reproduces_its_frozen_p99() -> None:
    factor = FROZEN["engine"]["slowdown"]
    table = FROZEN["flat_p99_without_offset"][f"{factor:g}"]
    p99, failures, aborted = fit.flat_p99(FROZEN["workload"], factor, 2, 30.0)
    assert [p99, failures, aborted] == pytest.approx(table["2@30"], abs=1e-9)


def test_the_paper_testbed_profile_is_the_frozen_slowdown_of_the_public_70b_profile() -> None:
    profile = PROFILES["paper-testbed"]
    assert profile == paper_testbed(FROZEN)
    assert profile.ttft_offset_ms == FROZEN["engine"]["ttft_offset_ms"]
    public = PROFILES["llama-3.3-70b-fp8-tp2-h100"]
    assert profile.decode_base_ms == pytest.approx(public.decode_base_ms * factor_of(FROZEN))
    assert profile.kv_blocks == public.kv_blocks


def factor_of(frozen: dict[str, Any]) -> float:
    return float(frozen["engine"]["slowdown"])
