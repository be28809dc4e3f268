"""``bench_route.py --runs``: the rounds of every run are pooled, each run's median kept beside."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.scripts import load_script


def load_bench() -> ModuleType:
    return load_script("bench/bench_route.py")


def run(ratios: list[float], batch: list[float], wall: float) -> dict[str, object]:
    return {
        "route_c16_p50_ratio_rounds": ratios,
        "route_c16_p50_ratio_median": sorted(ratios)[len(ratios) // 2],
        "batch_router": {"decisions_per_s": max(batch), "rounds": batch},
        "route_c16_router": {"p50_us": wall},
    }


def test_rounds_of_all_runs_are_pooled_and_each_runs_median_is_kept(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench()
    pooled = bench.pool_runs(
        [run([1.0, 1.3, 1.2], [10.0, 30.0], 1.0), run([1.1, 1.4, 0.9], [20.0, 40.0], 2.0)]
    )
    assert pooled["runs"] == 2
    assert pooled["route_c16_p50_ratio_rounds"] == [1.0, 1.3, 1.2, 1.1, 1.4, 0.9]
    assert pooled["route_c16_p50_ratio_median"] == pytest.approx(1.15)
    assert pooled["route_c16_p50_ratio_run_medians"] == [1.2, 1.1]
    assert pooled["batch_router"] == {"decisions_per_s": 25.0, "rounds": [10.0, 30.0, 20.0, 40.0]}
    assert pooled["route_c16_router"] == {"p50_us": 2.0}  # not pooled: the last run's
    assert "pooled over 2 runs 1.150 (runs: 1.200, 1.100)" in capsys.readouterr().out


def test_one_run_is_that_run() -> None:
    bench = load_bench()
    only = run([1.0, 1.3, 1.2], [10.0, 30.0], 1.0)
    pooled = bench.pool_runs([only])
    assert pooled["route_c16_p50_ratio_median"] == pytest.approx(1.2)
    assert pooled["route_c16_p50_ratio_run_medians"] == [1.2]
    assert pooled["batch_router"]["decisions_per_s"] == 20.0
