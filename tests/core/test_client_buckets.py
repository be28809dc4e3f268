"""Per-client token buckets for planning counts: the rate, the burst, batches, bounded memory."""

from __future__ import annotations

import pytest

from dataplane.core.client_buckets import ClientBuckets


def test_a_client_gets_one_seconds_worth_at_once_then_the_rate() -> None:
    buckets = ClientBuckets(10.0)
    assert sum(buckets.take("a", 0.0) for _ in range(50)) == 10
    assert buckets.take("a", 0.5, 100) == 5  # half a second refilled five
    assert buckets.take("a", 100.0, 100) == 10  # never more than the burst


def test_clients_have_their_own_buckets() -> None:
    buckets = ClientBuckets(2.0)
    assert buckets.take("a", 0.0, 5) == 2
    assert buckets.take("b", 0.0, 5) == 2


def test_a_rate_below_one_still_lets_one_request_count() -> None:
    buckets = ClientBuckets(0.5)
    assert buckets.take("a", 0.0, 3) == 1
    assert buckets.take("a", 1.0) == 0
    assert buckets.take("a", 2.0) == 1


def test_memory_is_bounded_by_max_clients_dropping_idle_buckets_first() -> None:
    buckets = ClientBuckets(1.0, max_clients=3)
    buckets.take("busy", 0.0)
    buckets.take("idle-1", 0.0)
    buckets.take("idle-2", 0.0)
    assert buckets.take("busy", 1.5) == 1  # empty again; the idle ones are full by now
    buckets.take("new", 1.6)
    assert len(buckets) <= 3
    assert buckets.take("busy", 1.6) == 0  # its (empty) bucket was kept, not reset to full
    for i in range(100):
        buckets.take(f"c{i}", 1.0)
    assert len(buckets) <= 3


@pytest.mark.parametrize(("rate", "max_clients"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bad_settings_are_rejected(rate: float, max_clients: int) -> None:
    with pytest.raises(ValueError):
        ClientBuckets(rate, max_clients=max_clients)
