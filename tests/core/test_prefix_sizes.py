"""Reusable-prefix sizes: ladder signatures of chained blocks, per-key sums, the window report."""

from __future__ import annotations

import itertools

import pytest

from cacheroute.v1 import routing_pb2
from dataplane.core.heavy_hitters import TrafficCounter
from dataplane.core.keys import chain_block, hash_key
from dataplane.core.prefix_sizes import (
    LADDER,
    PROMPT_EVERY,
    SAMPLE_EVERY,
    PrefixSizes,
    shared_blocks,
    signature,
)
from dataplane.core.route_input import parse_request


def chained(shared: int, tail: int, salt: bytes) -> tuple[int, ...]:
    """``shared`` blocks common to every call, then ``tail`` blocks unique to ``salt``."""
    blocks, parent = [], 0
    for i in range(shared + tail):
        chunk = f"shared-{i}".encode() if i < shared else salt + f"-{i}".encode()
        parent = chain_block(parent, chunk)
        blocks.append(parent)
    return tuple(blocks)


def test_the_ladder_is_every_block_to_16_then_within_an_eighth() -> None:
    assert LADDER[:16] == tuple(range(1, 17))
    assert LADDER[-1] == 1024
    assert all(b - a <= a / 8 for a, b in itertools.pairwise(LADDER[15:]))


@pytest.mark.parametrize("shared", [0, 1, 7, 16, 17, 40, 100, 300, 1000])
def test_shared_blocks_is_a_lower_bound_within_an_eighth(shared: int) -> None:
    a = signature(chained(shared, 20, b"a"))
    b = signature(chained(shared, 25, b"b"))
    got = shared_blocks(a, b)
    assert got <= shared
    assert got >= shared - shared / 8
    if shared <= 16:
        assert got == shared


def test_a_key_is_compared_with_its_previous_sample_and_unknown_is_not_zero() -> None:
    sizes = PrefixSizes(limit=10)
    sizes.observe(1, chained(40, 5, b"x"))  # the first sample only sets the reference
    sizes.observe(2, ())  # no prefix at all: not a sample
    sizes.observe(1, chained(40, 9, b"y"))
    sizes.observe(1, chained(40, 2, b"z"))
    taken = sizes.take(monitored={1})
    assert set(taken) == {1}
    total, samples = taken[1]
    assert samples == 2
    assert shared_blocks(signature(chained(40, 1, b"p")), signature(chained(40, 1, b"q"))) == 40
    assert total == 80
    assert sizes.take(monitored={1}) == {}  # sums start over, the reference stays
    sizes.observe(1, chained(40, 3, b"w"))
    assert sizes.take(monitored={1}) == {1: (40, 1)}


def test_signatures_are_bounded_and_pruned_to_the_monitored_keys() -> None:
    sizes = PrefixSizes(limit=4)
    for key in range(10):
        sizes.observe(key, chained(3, 1, b"k"))
    assert len(sizes) == 4
    sizes.take(monitored={0, 2, 99})
    assert len(sizes) == 2
    sizes.observe(50, chained(3, 1, b"k"))  # room again
    assert len(sizes) == 3


def test_the_traffic_report_carries_each_sampled_keys_mean_prefix() -> None:
    counter = TrafficCounter(capacity=16)
    due = [counter.add(7, "tenant-a") for _ in range(3 * SAMPLE_EVERY)]
    assert sum(due) == 3 and due[SAMPLE_EVERY - 1]
    counter.sizes.observe(7, chained(30, 1, b"1"))
    counter.sizes.observe(7, chained(30, 4, b"2"))
    counter.sizes.observe(7, chained(10, 4, b"3"))
    counter.add(8, "tenant-b")
    report = counter.drain("r1", "default", 10**13)
    assert report is not None
    by_key = {kc.key: kc for kc in report.top_keys}
    assert by_key["tenant-a"].prefix_samples == 2
    assert by_key["tenant-a"].reusable_prefix_blocks == pytest.approx((30 + 10) / 2)
    assert by_key["tenant-b"].prefix_samples == 0  # unknown, not zero


def test_blocks_at_hand_are_read_and_prompts_are_hashed_every_eighth_due_sample() -> None:
    sizes = PrefixSizes(limit=10)
    prompt = "You are a helpful assistant. " * 20  # 580 bytes: 9 full blocks of 64 shared
    with_prompt = [
        parse_request(routing_pb2.RouteRequest(key="p", prompt_prefix=prompt + f"#{i}"))
        for i in range(3 * PROMPT_EVERY)
    ]
    for inp in with_prompt:
        sizes.sample(inp, None)
    assert sizes.take(monitored=()) == {hash_key("p"): (2 * 9, 2)}  # 3 hashed: 2 comparisons
    given = parse_request(routing_pb2.RouteRequest(key="g", prefix_blocks=[1, 2, 3]))
    sizes.sample(given, None)
    sizes.sample(given, None)  # given blocks: every due sample
    sizes.sample(with_prompt[0], (7, 8))  # the policy's blocks: read, never skipped
    sizes.sample(with_prompt[1], (7, 9))
    # p: (7, 8) shares nothing with its last prompt, (7, 9) one block with (7, 8)
    assert sizes.take(monitored=()) == {hash_key("g"): (3, 1), hash_key("p"): (1, 2)}
