"""The low-sharing regime: ≈ 1% of tokens shared across keys, ≈ 10% within a key."""

from __future__ import annotations

import numpy as np
import pytest

from sim.types import SimRequest
from sim.workloads.lowshare import LowShareWorkload
from sim.workloads.stats import ideal_hit


@pytest.fixture(scope="module")
def requests() -> list[SimRequest]:
    return LowShareWorkload().requests(qps=60, duration_s=120, seed=1)


def test_cross_key_reuse_is_about_1_percent(requests: list[SimRequest]) -> None:
    assert ideal_hit(requests, "cross") == pytest.approx(0.01, abs=0.002)


def test_per_key_reuse_is_about_10_percent(requests: list[SimRequest]) -> None:
    assert ideal_hit(requests, "key") == pytest.approx(0.10, abs=0.01)


def test_prompts_are_long_and_single_turn(requests: list[SimRequest]) -> None:
    tokens = np.array([r.prompt_tokens for r in requests])
    assert tokens.mean() == pytest.approx(4800, rel=0.04)
    assert all(r.thread == -1 for r in requests)


def test_same_seed_same_stream() -> None:
    workload = LowShareWorkload(top_k=8)
    assert workload.requests(qps=5, duration_s=10, seed=2) == workload.requests(
        qps=5, duration_s=10, seed=2
    )
