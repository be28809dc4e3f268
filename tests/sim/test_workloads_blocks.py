"""Synthetic block ids: equal ids exactly when the prefixes are equal; fast paths agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.types import BLOCK_TOKENS
from sim.workloads.blocks import (
    ID_MASK,
    mix,
    mix_int,
    segment_blocks,
    splitmix64,
    sub_blocks,
    to_tuples,
)

Segments = list[list[tuple[int, int]]]  # per request: (content id, length) of each segment


def _reference(requests: Segments) -> list[list[tuple[tuple[int, int], ...]]]:
    """Per block, the full token content of the prefix it closes: a token is (id, offset)."""
    out = []
    for segs in requests:
        tokens = [(sid, o) for sid, n in segs for o in range(n)]
        ends = [min(BLOCK_TOKENS * (i + 1), len(tokens)) for i in range(-(-len(tokens) // 16))]
        out.append([tuple(tokens[:e]) for e in ends])
    return out


def _run(requests: Segments) -> list[tuple[int, ...]]:
    ids = np.array([sid for segs in requests for sid, _ in segs], dtype=np.uint64)
    lens = np.array([n for segs in requests for _, n in segs], dtype=np.int64)
    start = np.concatenate(([0], np.cumsum([len(s) for s in requests]))).astype(np.int64)
    flat, block_start = segment_blocks(ids, lens, start)
    return to_tuples(flat, block_start)


# Few content ids and short lengths so that requests often share prefixes, and the same id
# appears with different lengths (an id alone does not fix where the next segment starts).
segment = st.tuples(st.integers(0, 3), st.integers(1, 40))
streams = st.lists(st.lists(segment, min_size=1, max_size=5), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(streams)
def test_segment_blocks_ids_are_equal_exactly_when_prefix_content_is_equal(
    requests: Segments,
) -> None:
    got = _run(requests)
    want = _reference(requests)
    pairs = {(g, w) for gs, ws in zip(got, want, strict=True) for g, w in zip(gs, ws, strict=True)}
    assert len({g for g, _ in pairs}) == len(pairs)  # one content per id
    assert len({w for _, w in pairs}) == len(pairs)  # one id per content


@given(streams)
def test_segment_blocks_gives_ceil_tokens_over_16_blocks_per_request(requests: Segments) -> None:
    got = _run(requests)
    assert [len(b) for b in got] == [-(-sum(n for _, n in s) // 16) for s in requests]


def test_block_ids_fit_in_63_bits() -> None:
    got = _run([[(i, 300)] for i in range(50)])
    assert all(0 <= b <= ID_MASK for blocks in got for b in blocks)


def test_mix_int_equals_vectorised_mix() -> None:
    parents = [0, 1, 2**63 + 5, 2**64 - 1]
    values = [0, 7, 2**40, 2**64 - 2]
    vec = mix(np.array(parents, dtype=np.uint64), np.array(values, dtype=np.uint64))
    assert [mix_int(p, v) for p, v in zip(parents, values, strict=True)] == vec.tolist()


def test_splitmix64_is_a_bijection_on_a_sample() -> None:
    x = np.arange(100_000, dtype=np.uint64)
    assert len(np.unique(splitmix64(x))) == len(x)


def test_sub_blocks_keep_prefix_equality_of_coarse_ids() -> None:
    # Requests 0 and 1 share their first coarse block; request 2 shares nothing.
    coarse = np.array([10, 11, 10, 12, 13], dtype=np.uint64)
    start = np.array([0, 2, 4, 5], dtype=np.int64)
    tokens = np.array([512 + 40, 512 + 300, 100], dtype=np.int64)
    flat, block_start = sub_blocks(coarse, start, tokens, 512)
    a, b, c = to_tuples(flat, block_start)
    assert (len(a), len(b), len(c)) == (35, 51, 7)
    assert a[:32] == b[:32]
    assert a[32] != b[32]
    assert not set(c) & (set(a) | set(b))


def test_sub_blocks_refuses_requests_longer_than_their_coarse_ids() -> None:
    with pytest.raises(ValueError, match="coarse ids"):
        sub_blocks(
            np.array([1], dtype=np.uint64),
            np.array([0, 1], dtype=np.int64),
            np.array([513], dtype=np.int64),
            512,
        )
