"""The paper's key population: Table 6's popularity facts, active sets and key hashing."""

from __future__ import annotations

import numpy as np
import pytest

from dataplane.core.keys import hash_key
from sim.workloads.popularity import (
    PAPER_BETA,
    PAPER_GINI,
    PAPER_KEYS,
    PAPER_MAX_SHARE,
    PAPER_SIGMA,
    PAPER_TOP_FRACTION,
    PAPER_TOP_SHARE,
    PopularityError,
    fit_shape,
    paper_active_set,
    paper_weights,
)
from sim.workloads.stats import gini, top_share


def test_population_has_the_papers_key_count_and_gini() -> None:
    w = paper_weights()
    assert len(w) == 128_824
    assert w.sum() == pytest.approx(1.0)
    assert gini(w) == pytest.approx(0.756, abs=0.0005)


def test_top_four_percent_of_keys_carry_47_percent_of_traffic() -> None:
    assert top_share(paper_weights(), 0.04) == pytest.approx(0.47, abs=0.002)


def test_largest_key_stays_under_the_papers_bound() -> None:
    w = paper_weights()
    assert w.max() < 0.003
    assert np.all(np.diff(w) <= 0)  # most popular first


@pytest.mark.slow
def test_shape_constants_are_the_solution_of_the_fit() -> None:
    sigma, beta = fit_shape(
        PAPER_KEYS, PAPER_GINI, PAPER_TOP_FRACTION, PAPER_TOP_SHARE, PAPER_MAX_SHARE
    )
    assert (sigma, beta) == pytest.approx((PAPER_SIGMA, PAPER_BETA), abs=1e-6)


def test_active_set_is_the_top_k_keys_renormalised() -> None:
    active = paper_active_set(128)
    assert len(active) == 128
    assert active.names[0] == "biz-000000"
    assert active.weights.sum() == pytest.approx(1.0)
    ratio = active.weights / paper_weights()[:128]
    assert ratio == pytest.approx(np.full(128, ratio[0]))


def test_active_keys_hash_with_the_one_key_hash() -> None:
    active = paper_active_set(16)
    assert list(active.hashes) == [hash_key(k) for k in active.names]


@pytest.mark.parametrize("top_k", [0, -1, 128_825])
def test_top_k_out_of_range_is_refused(top_k: int) -> None:
    with pytest.raises(PopularityError, match="top_k"):
        paper_active_set(top_k)
