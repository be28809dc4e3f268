"""Capacity over a ladder: pass rule, first-failure knee, censoring, Student-t intervals."""

from __future__ import annotations

import math

import pytest

from sim.capacity import (
    Rung,
    capacity_across_seeds,
    format_interval,
    knee,
    mean_ci95,
    t_quantile_975,
)


def ladder(*p99s: float, failures: float = 0.0) -> list[Rung]:
    return [Rung(30.0 * (i + 1), p99, failures) for i, p99 in enumerate(p99s)]


def test_capacity_is_the_rung_below_the_first_failure() -> None:
    result = knee(ladder(1.0, 2.0, 3.4, 4.0, 9.0), 3.5)
    assert result.capacity == 90.0 and result.censored is None and not result.non_monotone


def test_a_pass_above_a_failure_does_not_count_and_is_flagged() -> None:
    result = knee(ladder(1.0, 4.0, 3.0, 9.0), 3.5)
    assert result.capacity == 30.0 and result.non_monotone


def test_failures_above_five_percent_fail_a_rung_even_with_a_good_p99() -> None:
    rungs = [Rung(30, 1.0, 0.0), Rung(60, 1.0, 0.06)]
    assert knee(rungs, 3.5).capacity == 30


def test_an_aborted_rung_fails() -> None:
    rungs = [Rung(30, 1.0, 0.0), Rung(60, 1.0, 0.0, aborted=True)]
    assert knee(rungs, 3.5).capacity == 30


def test_censoring_is_marked_at_both_ends() -> None:
    assert knee(ladder(9.0, 9.0), 3.5) == knee(ladder(9.0), 3.5)
    left = knee(ladder(9.0, 1.0), 3.5)
    assert left.capacity == 0.0 and left.censored == "left"
    right = knee(ladder(1.0, 2.0), 3.5)
    assert right.capacity == 60.0 and right.censored == "right"


def test_rungs_are_sorted_by_qps_before_the_search() -> None:
    rungs = [Rung(90, 9.0, 0.0), Rung(30, 1.0, 0.0), Rung(60, 1.0, 0.0)]
    assert knee(rungs, 3.5).capacity == 60


def test_t_quantiles_match_the_standard_table() -> None:
    assert t_quantile_975(1) == 12.706
    assert t_quantile_975(2) == 4.303
    assert t_quantile_975(30) == 2.042
    assert t_quantile_975(45) == 2.021  # conservative: the next smaller tabulated df
    assert t_quantile_975(10_000) == 1.960
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_mean_ci95_uses_student_t() -> None:
    interval = mean_ci95([100.0, 120.0, 140.0])
    half = 4.303 * 20.0 / math.sqrt(3)
    assert interval.mean == pytest.approx(120.0)
    assert (interval.low, interval.high) == pytest.approx((120 - half, 120 + half))
    single = mean_ci95([80.0])
    assert single.low == single.high == 80.0


def test_seeds_aggregate_with_their_censoring() -> None:
    interval, knees = capacity_across_seeds(
        [ladder(1.0, 1.0), ladder(1.0, 9.0), ladder(1.0, 1.0)], 3.5
    )
    assert [k.capacity for k in knees] == [60.0, 30.0, 60.0]
    assert interval.mean == pytest.approx(50.0) and interval.censored == ("right",)
    assert format_interval(interval).startswith("≥50 ± ")


def test_a_capacity_below_the_whole_ladder_reads_as_below_its_lowest_rung() -> None:
    interval, _ = capacity_across_seeds([ladder(9.0), ladder(9.0)], 3.5)
    assert format_interval(interval, lowest=30.0) == "<30"
