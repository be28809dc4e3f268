"""Arrival processes have the requested mean rate and the CV of their law or source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.workloads.arrivals import ArrivalError, ArrivalProcess, azure_gaps


def _gaps_cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


def test_poisson_has_the_mean_rate_and_cv_one() -> None:
    times = ArrivalProcess("poisson").times(np.random.default_rng(1), 200.0, 300.0)
    assert len(times) / 300.0 == pytest.approx(200.0, rel=0.02)
    assert _gaps_cv(times) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("cv", [0.5, 1.9, 3.0])
def test_gamma_has_the_mean_rate_and_the_requested_cv(cv: float) -> None:
    times = ArrivalProcess("gamma", cv=cv).times(np.random.default_rng(2), 100.0, 1000.0)
    assert len(times) / 1000.0 == pytest.approx(100.0, rel=0.03)
    assert _gaps_cv(times) == pytest.approx(cv, rel=0.06)


def test_times_are_sorted_and_inside_the_window() -> None:
    for kind in ("poisson", "gamma"):
        times = ArrivalProcess(kind).times(np.random.default_rng(3), 50.0, 20.0)
        assert np.all(np.diff(times) >= 0)
        assert times.min() >= 0 and times.max() < 20.0


def test_same_seed_same_times_other_seed_other_times() -> None:
    process = ArrivalProcess("gamma")
    a = process.times(np.random.default_rng(5), 30.0, 10.0)
    b = process.times(np.random.default_rng(5), 30.0, 10.0)
    c = process.times(np.random.default_rng(6), 30.0, 10.0)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.traces
def test_bootstrap_keeps_the_source_gap_cv_at_the_target_rate(traces_dir: Path) -> None:
    source = traces_dir / "azure_llm_2023_conv.csv"
    gaps = azure_gaps(source)
    assert len(gaps) == 19_365
    source_cv = float(gaps.std() / gaps.mean())
    assert source_cv == pytest.approx(1.09, abs=0.01)
    times = ArrivalProcess("bootstrap", gaps_path=source).times(
        np.random.default_rng(7), 300.0, 600.0
    )
    assert len(times) / 600.0 == pytest.approx(300.0, rel=0.05)
    assert _gaps_cv(times) == pytest.approx(source_cv, rel=0.05)


@pytest.mark.traces
def test_bootstrap_keeps_slow_rate_swings_that_poisson_lacks(traces_dir: Path) -> None:
    source = traces_dir / "azure_llm_2023_conv.csv"
    rng = np.random.default_rng(8)
    boot = ArrivalProcess("bootstrap", gaps_path=source).times(rng, 300.0, 600.0)
    poisson = ArrivalProcess("poisson").times(rng, 300.0, 600.0)

    def dispersion(times: np.ndarray) -> float:  # variance / mean of counts per 0.5 s
        counts = np.bincount((times / 0.5).astype(int))
        return float(counts.var() / counts.mean())

    assert dispersion(poisson) == pytest.approx(1.0, abs=0.2)
    assert dispersion(boot) > 2.0


def test_unknown_arrival_kind_is_refused_by_name() -> None:
    with pytest.raises(ArrivalError, match="arrival must be one of poisson, gamma, bootstrap"):
        ArrivalProcess("burst")


def test_gamma_needs_a_positive_cv() -> None:
    with pytest.raises(ArrivalError, match="cv"):
        ArrivalProcess("gamma", cv=0.0)


def test_bootstrap_without_a_gap_file_says_which_path(tmp_path: Path) -> None:
    process = ArrivalProcess("bootstrap", gaps_path=tmp_path / "missing.csv")
    with pytest.raises(ArrivalError, match=r"missing\.csv"):
        process.times(np.random.default_rng(0), 1.0, 1.0)
