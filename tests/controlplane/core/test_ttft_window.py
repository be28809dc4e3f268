"""controlplane.core.ttft_window: deltas of cumulative histograms, resets, merging, and the
quantile."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.core.ttft_window import Buckets, NodeWindow, TtftWindows, delta, merge, quantile

BOUNDS = (0.1, 0.5, 1.0, 5.0)


def cum(*counts: float, total: float | None = None) -> Buckets:
    return Buckets(BOUNDS, tuple(counts), counts[-1] if total is None else total)


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    # 10 in (0, 0.1], 10 in (0.1, 0.5]: the median is the bucket edge, p75 halfway in bucket 2.
    b = cum(10, 20, 20, 20)
    assert quantile(0.5, b) == pytest.approx(0.1)
    assert quantile(0.75, b) == pytest.approx(0.3)
    assert quantile(0.25, b) == pytest.approx(0.05)  # the first bucket starts at 0


def test_a_rank_in_the_inf_bucket_gives_the_highest_finite_bound() -> None:
    assert quantile(0.99, cum(0, 0, 0, 1, total=100)) == 5.0


def test_no_observations_give_no_quantile() -> None:
    assert quantile(0.99, Buckets.empty()) is None
    assert quantile(0.99, cum(0, 0, 0, 0)) is None
    with pytest.raises(ValueError, match="quantile"):
        quantile(1.5, cum(1, 1, 1, 1))


def test_delta_subtracts_and_a_decrease_is_a_counter_reset() -> None:
    assert delta(cum(1, 2, 3, 4), cum(2, 4, 6, 8)) == cum(1, 2, 3, 4)
    restarted = cum(0, 1, 1, 1)
    assert delta(cum(5, 5, 5, 5), restarted) is restarted
    assert delta(None, cum(1, 1, 1, 1)) is None
    other = Buckets((0.2,), (1.0,), 1.0)
    assert delta(cum(1, 1, 1, 1), other) is None  # the layout changed: start afresh


def test_node_window_keeps_stamped_deltas_and_ignores_a_reread_report() -> None:
    window = NodeWindow(retention_ms=10_000)
    assert window.observe(1_000, cum(0, 0, 0, 0))
    assert window.observe(2_000, cum(5, 5, 5, 5))
    assert not window.observe(2_000, cum(9, 9, 9, 9))  # the same report read again
    assert window.observe(3_000, cum(1, 1, 1, 1))  # restart
    assert window.resets == 1
    assert [b.total for b in window.between(0, 3_000)] == [5.0, 1.0]
    assert [b.total for b in window.between(2_000, 3_000)] == [1.0]
    window.observe(20_000, cum(2, 2, 2, 2))
    assert [b.total for b in window.between(0, 20_000)] == [1.0]  # the old ones expired


def test_merge_sums_nodes_and_aligns_different_bounds_conservatively() -> None:
    a = Buckets((0.1, 1.0), (4.0, 10.0), 10.0)
    b = Buckets((0.5, 1.0), (2.0, 10.0), 10.0)
    m = merge([a, b])
    assert m.bounds == (0.1, 0.5, 1.0)
    assert m.cumulative == (4.0, 6.0, 20.0)  # a at 0.5 = its count at 0.1 (an under-count)
    assert m.total == 20.0


def test_pool_quantile_over_a_window_merges_the_nodes_deltas() -> None:
    windows = TtftWindows()
    for node, late in (("a", 0.0), ("b", 10.0)):
        windows.observe("p", node, 1_000, cum(0, 0, 0, 0))
        windows.observe("p", node, 2_000, cum(10, 10, 10, 10))  # fast, before
        windows.observe("p", node, 3_000, cum(10, 10, 10 + late, 10 + late))  # b slow after
    windows.observe("q", "c", 1_000, cum(0, 0, 0, 0))
    before = windows.quantile("p", 0.99, 0, 2_000)
    after = windows.quantile("p", 0.99, 2_000, 3_000)
    assert before.samples == 20 and before.nodes == 2
    assert before.value_s is not None and before.value_s <= 0.1
    assert after.samples == 10 and after.nodes == 1
    assert after.value_s is not None and 0.5 < after.value_s <= 1.0
    windows.forget("p", keep=["a"])
    assert windows.quantile("p", 0.99, 2_000, 3_000).samples == 0


@given(
    st.lists(st.integers(min_value=0, max_value=50), min_size=4, max_size=4),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_the_quantile_lies_within_the_bucket_that_holds_its_rank(
    per_bucket: list[int], q: float
) -> None:
    counts: list[float] = []
    for c in per_bucket:
        counts.append((counts[-1] if counts else 0.0) + c)
    b = cum(*counts)
    got = quantile(q, b)
    if b.total == 0:
        assert got is None
        return
    assert got is not None and 0.0 <= got <= BOUNDS[-1]
    rank = q * b.total
    first = next(i for i, c in enumerate(counts) if c >= rank)
    low = BOUNDS[first - 1] if first else 0.0
    assert low - 1e-12 <= got <= BOUNDS[first] + 1e-12


def test_deltas_within_a_second_are_kept_as_one_with_the_same_totals() -> None:
    window = NodeWindow()
    window.observe(10_000, cum(0, 0, 0, 0))
    for i, at in enumerate((10_250, 10_500, 10_750, 11_000), start=1):
        window.observe(at, cum(i, 2 * i, 2 * i, 2 * i))
    assert [at for at, _ in window.deltas] == [10_750, 11_000]
    assert [b.cumulative for _, b in window.deltas] == [(3, 6, 6, 6), (1, 2, 2, 2)]
    assert merge(window.between(0, 11_000)) == cum(4, 8, 8, 8)


def test_a_node_reporting_more_than_an_engine_could_serve_is_dropped_not_merged() -> None:
    """Issue 32: one node's counts moved the pool's p99 from 2.33 s to 0.01 s."""
    windows = TtftWindows()
    for node in ("a", "b", "c"):
        windows.observe("p", node, 1_000, cum(0, 0, 0, 0))
        windows.observe("p", node, 11_000, cum(0, 0, 100, 100))  # 10/s, all in (0.5, 1]
    honest = windows.quantile("p", 0.99, 0, 20_000).value_s
    assert honest is not None and honest > 0.5
    windows.observe("p", "liar", 1_000, cum(0, 0, 0, 0))
    windows.observe("p", "liar", 11_000, cum(1e9, 1e9, 1e9, 1e9))  # 1e8/s in (0, 0.1]
    assert windows.quantile("p", 0.99, 0, 20_000).value_s == honest
    liar = NodeWindow()
    liar.observe(1_000, cum(0, 0, 0, 0))
    liar.observe(2_000, cum(2_001, 2_001, 2_001, 2_001))
    liar.observe(3_000, cum(2_001, 2_001, 2_001, 4_001))
    assert liar.implausible == 1 and [b.total for _, b in liar.deltas] == [2_000]
