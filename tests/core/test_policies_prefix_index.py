"""The shared prefix index: longest held prefix, per-node LRU caps, owner bitmasks."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.core.load_view import NodeSet
from dataplane.core.policies.prefix_index import EligibleMask, PrefixIndex, index_for, lightest

NODES = NodeSet(["a", "b", "c", "d"])
ALL = 0b1111


def bits(*nodes: int) -> int:
    mask = 0
    for node in nodes:
        mask |= 1 << node
    return mask


def make_index(cap: int = 1000) -> PrefixIndex:
    index = PrefixIndex(NODES, cap)
    index.insert(0, [1, 2, 3])
    index.insert(1, [1, 2, 3, 4, 5])
    index.insert(2, [1, 2, 9])
    return index


@pytest.mark.parametrize(
    ("blocks", "allowed", "expected"),
    [
        ([], ALL, (0, 0)),
        ([7, 8], ALL, (0, 0)),  # nobody holds the first block
        ([1], ALL, (1, bits(0, 1, 2))),
        ([1, 2, 3], ALL, (3, bits(0, 1))),
        ([1, 2, 3, 4, 5, 6], ALL, (5, bits(1))),
        ([1, 2, 9, 4], ALL, (3, bits(2))),
        ([1, 2, 3, 4, 5], bits(0, 2, 3), (3, bits(0))),  # node 1 not allowed: node 0's 3 wins
        ([1, 2, 3], bits(3), (0, 0)),
        ([2, 3], ALL, (2, bits(0, 1))),  # a walk starts at the first block given
    ],
)
def test_match_returns_the_longest_allowed_prefix_and_its_holders(
    blocks: list[int], allowed: int, expected: tuple[int, int]
) -> None:
    assert make_index().match(blocks, allowed) == expected


def test_insert_evicts_the_oldest_tails_first_past_the_cap() -> None:
    index = PrefixIndex(NODES, 4)
    index.insert(0, [1, 2, 3])
    index.insert(0, [10, 11])  # 5 blocks: the deepest block of the older prefix goes first
    assert index.block_count(0) == 4
    assert index.match([1, 2, 3], ALL) == (2, bits(0))
    assert index.match([10, 11], ALL) == (2, bits(0))


def test_eviction_clears_the_node_bit_and_forgets_unheld_blocks() -> None:
    index = PrefixIndex(NODES, 2)
    index.insert(0, [1, 2])
    index.insert(1, [1, 2])
    index.insert(0, [5, 6])  # evicts 2 then 1 from node 0
    assert index.holders(1) == bits(1)
    assert index.holders(2) == bits(1)
    index.insert(1, [7, 8])
    assert index.holders(1) == 0
    assert len(index) == 4  # 5, 6 on node 0; 7, 8 on node 1


def test_reinserting_a_prefix_refreshes_it_in_the_lru() -> None:
    index = PrefixIndex(NODES, 4)
    index.insert(0, [1, 2])
    index.insert(0, [3, 4])
    index.insert(0, [1, 2])  # refresh: now [3, 4] is the oldest
    index.insert(0, [5, 6])
    assert index.match([1, 2], ALL) == (2, bits(0))
    assert index.match([3, 4], ALL) == (0, 0)


def test_a_prefix_longer_than_the_cap_keeps_its_root() -> None:
    index = PrefixIndex(NODES, 3)
    index.insert(0, list(range(1, 11)))
    assert index.match(list(range(1, 11)), ALL) == (3, bits(0))


@pytest.mark.parametrize(
    ("mask", "loads", "expected"),
    [
        (bits(2), [0, 0, 5, 0], 2),
        (bits(0, 1, 2), [3, 1, 1, 0], 1),  # tie at 1: lowest index
        (bits(1, 3), [0, 2, 0, 2], 1),
        (bits(0, 3), [4, 0, 0, 3.5], 3),
    ],
)
def test_lightest_is_least_loaded_then_lowest_index(
    mask: int, loads: list[float], expected: int
) -> None:
    assert lightest(mask, loads) == expected


def test_eligible_mask_is_recomputed_only_for_a_new_list() -> None:
    cache = EligibleMask()
    eligible = [0, 2]
    assert cache.of(eligible) == bits(0, 2)
    assert cache.of(eligible) == bits(0, 2)
    assert cache.of([1, 3]) == bits(1, 3)


def test_index_for_keeps_the_index_of_the_same_nodeset_object_only() -> None:
    index = index_for(None, NODES, 10)
    index.insert(0, [1])
    assert index_for(index, NODES, 10) is index
    fresh = index_for(index, NodeSet(NODES.ids), 10)
    assert fresh is not index
    assert len(fresh) == 0


def test_cap_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_blocks_per_node"):
        PrefixIndex(NODES, 0)


class Reference:
    """The obvious model: a per-node ordered set of blocks, evicting the least recent."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(4)]

    def insert(self, node: int, blocks: list[int]) -> None:
        held = self.held[node]
        for block in reversed(blocks):
            held.pop(block, None)
            held[block] = None
        while len(held) > self.cap:
            held.popitem(last=False)

    def match(self, blocks: list[int], allowed: int) -> tuple[int, int]:
        best, holders = 0, 0
        for node in range(4):
            if not allowed >> node & 1:
                continue
            depth = 0
            while depth < len(blocks) and blocks[depth] in self.held[node]:
                depth += 1
            if depth > best:
                best, holders = depth, 1 << node
            elif depth == best and depth > 0:
                holders |= 1 << node
        return best, holders


block_lists = st.lists(st.integers(0, 12), min_size=0, max_size=6, unique=True)


@settings(max_examples=200, deadline=None)
@given(
    cap=st.integers(1, 8),
    inserts=st.lists(st.tuples(st.integers(0, 3), block_lists), max_size=25),
    query=block_lists,
    allowed=st.integers(0, ALL),
)
def test_match_agrees_with_a_per_node_reference_model(
    cap: int, inserts: list[tuple[int, list[int]]], query: list[int], allowed: int
) -> None:
    index = PrefixIndex(NODES, cap)
    reference = Reference(cap)
    for node, blocks in inserts:
        index.insert(node, blocks)
        reference.insert(node, blocks)
    for node in range(4):
        assert index.block_count(node) == len(reference.held[node])
    assert index.match(query, allowed) == reference.match(query, allowed)
