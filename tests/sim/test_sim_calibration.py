"""The NIM concurrency check and the single-destination knee that sets q_cap."""

from __future__ import annotations

import pytest

from sim.calibration import NIM_70B, closed_loop, nim_curve, single_destination_knee
from sim.engine_model import LLAMA_70B
from tests.support.tiny_workload import TinyWorkload


def test_the_70b_profile_tracks_the_nim_curve_up_to_concurrency_50() -> None:
    points = nim_curve(LLAMA_70B, NIM_70B[:4])
    assert points[0].ttft_ms == pytest.approx(406.8, rel=1e-3)
    assert points[0].itl_ms == pytest.approx(18.58, rel=1e-2)
    for point in points:  # within 25% of every measured point below saturation
        assert point.ttft_ms == pytest.approx(point.ref_ttft_ms, rel=0.25)
        assert point.itl_ms == pytest.approx(point.ref_itl_ms, rel=0.25)
    assert [p.itl_ms for p in points] == sorted(p.itl_ms for p in points)


def test_closed_loop_measures_after_the_warm_up_rounds() -> None:
    _, _, count = closed_loop(LLAMA_70B, 3, rounds=5, warm_rounds=2)
    assert count == 9


def test_the_knee_is_the_highest_rate_meeting_the_slo() -> None:
    workload = TinyWorkload(prompt_tokens=2000, output_tokens=100)
    result = single_destination_knee(
        workload, LLAMA_70B, slo_s=1.0, duration_s=120, min_requests=500, iterations=5
    )
    passed = [p.qps for p in result.probes if p.passed]
    failed = [p.qps for p in result.probes if not p.passed]
    assert result.q_cap == max(passed)
    assert failed and min(failed) > result.q_cap
    assert min(failed) - result.q_cap <= result.q_cap / 8  # bisection resolution
