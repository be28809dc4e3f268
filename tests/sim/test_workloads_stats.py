"""Stream statistics on small hand-made streams whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from dataplane.core.keys import hash_key
from sim.types import SimRequest
from sim.workloads.stats import (
    StatsError,
    consecutive_common_blocks,
    gini,
    hit_blocks,
    ideal_hit,
    key_counts,
    key_interarrival_cv,
    thread_stats,
    top_share,
)


def req(
    t: float, key: str, blocks: tuple[int, ...], tokens: int | None = None, thread: int = -1
) -> SimRequest:
    return SimRequest(t, key, hash_key(key), blocks, tokens or 16 * len(blocks), 10, thread)


def test_gini_is_zero_for_equal_weights_and_near_one_for_one_holder() -> None:
    assert gini([5, 5, 5, 5]) == pytest.approx(0.0)
    assert gini([0] * 999 + [1]) == pytest.approx(0.999)


def test_gini_of_a_known_distribution() -> None:
    # Weights 1..4: G = sum_i sum_j |x_i - x_j| / (2 n^2 mean) = 20 / (2 * 16 * 2.5) = 0.25.
    assert gini([1, 2, 3, 4]) == pytest.approx(0.25)


def test_top_share_takes_the_largest_weights() -> None:
    assert top_share([1, 1, 1, 7], 0.25) == pytest.approx(0.7)
    assert top_share([1, 1, 1, 7], 0.01) == pytest.approx(0.7)  # at least one key


def test_ideal_hit_counts_leading_blocks_seen_before_in_tokens() -> None:
    stream = [
        req(0, "a", (1, 2, 3), tokens=40),
        req(1, "a", (1, 2, 4), tokens=40),  # 2 leading blocks seen: 32 tokens
        req(2, "b", (1, 2, 3), tokens=40),  # all 3 seen: 40 tokens (partial last block)
    ]
    assert hit_blocks(stream).tolist() == [0, 2, 3]
    assert ideal_hit(stream) == pytest.approx((32 + 40) / 120)


def test_key_scope_only_sees_the_same_keys_requests() -> None:
    stream = [req(0, "a", (1, 2)), req(1, "b", (1, 2)), req(2, "a", (1, 3))]
    assert hit_blocks(stream, "key").tolist() == [0, 0, 1]


def test_cross_scope_only_sees_other_keys_requests() -> None:
    stream = [
        req(0, "a", (1, 2)),
        req(1, "a", (1, 2)),  # only its own key had it: no cross hit
        req(2, "b", (1, 5)),  # key a had block 1
        req(3, "a", (1, 5)),  # key b had 1 and (1, 5)
    ]
    assert hit_blocks(stream, "cross").tolist() == [0, 0, 1, 2]


def test_hit_scope_must_be_known() -> None:
    with pytest.raises(StatsError, match="scope"):
        hit_blocks([req(0, "a", (1,))], "nope")


def test_thread_stats_count_requests_per_thread_and_multi_turn_share() -> None:
    stream = [req(i, "a", (i,), thread=t) for i, t in enumerate([7, 7, 7, 8, -1])]
    stats = thread_stats(stream)
    assert stats.threads == 3
    assert stats.mean_requests == pytest.approx(5 / 3)
    assert stats.multi_turn_share == pytest.approx(3 / 5)


def test_interarrival_cv_of_regular_and_clustered_keys() -> None:
    regular = [req(float(t), "r", (1,)) for t in range(10)]
    clustered = [req(t, "c", (1,)) for t in (0, 1, 2, 100, 101, 102)]
    cvs = key_interarrival_cv(sorted(regular + clustered, key=lambda r: r.arrival_s))
    gaps = np.array([1, 1, 98, 1, 1], dtype=float)
    assert sorted(cvs.tolist()) == pytest.approx(sorted([0.0, gaps.std(ddof=1) / gaps.mean()]))


def test_interarrival_cv_skips_keys_with_few_requests() -> None:
    assert len(key_interarrival_cv([req(t, "a", (1,)) for t in range(4)], min_requests=5)) == 0


def test_consecutive_common_blocks_pairs_requests_of_the_same_key() -> None:
    stream = [
        req(0, "a", (1, 2, 3)),
        req(1, "b", (9,)),
        req(2, "a", (1, 2, 4)),
        req(3, "a", (5,)),
    ]
    assert consecutive_common_blocks(stream).tolist() == [2, 0]
    assert key_counts(stream) == {"a": 3, "b": 1}
