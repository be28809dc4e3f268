"""The whales workload: a few keys hot enough to need replicas on the 8B testbed."""

from __future__ import annotations

import math

import pytest

from sim.workloads.stats import key_rates
from sim.workloads.whales import (
    Q_CAP_8B,
    REFERENCE_QPS,
    WHALE_SHARES,
    WhaleError,
    WhalesWorkload,
)

DURATION = 120.0


@pytest.fixture(scope="module")
def rates() -> dict[str, float]:
    requests = WhalesWorkload().requests(qps=REFERENCE_QPS, duration_s=DURATION, seed=3)
    return key_rates(requests, DURATION)


def test_whales_carry_their_shares_of_traffic(rates: dict[str, float]) -> None:
    total = sum(rates.values())
    for i, share in enumerate(WHALE_SHARES):
        assert rates[f"whale-{i}"] / total == pytest.approx(share, abs=0.01)


def test_some_whales_need_more_than_one_replica_at_half_load(rates: dict[str, float]) -> None:
    replicas = {k: max(1, math.ceil(r / Q_CAP_8B)) for k, r in rates.items()}
    assert replicas["whale-0"] >= 2
    assert replicas["whale-1"] >= 2
    assert all(n == 1 for k, n in replicas.items() if not k.startswith("whale-"))


def test_ordinary_keys_share_the_rest_over_the_active_set(rates: dict[str, float]) -> None:
    ordinary = [k for k in rates if k.startswith("biz-")]
    assert 120 <= len(ordinary) <= 128
    assert sum(rates[k] for k in ordinary) / sum(rates.values()) == pytest.approx(0.70, abs=0.02)


@pytest.mark.parametrize("top_k", [16, 2000])
def test_top_k_spans_the_papers_8b_range(top_k: int) -> None:
    requests = WhalesWorkload(top_k=top_k).requests(qps=100, duration_s=20, seed=1)
    keys = {r.key for r in requests}
    assert {f"whale-{i}" for i in range(4)} <= keys
    assert len(keys) <= top_k + 4


def test_whale_shares_must_leave_room_for_ordinary_keys() -> None:
    with pytest.raises(WhaleError, match="shares"):
        WhalesWorkload(shares=(0.6, 0.5))
