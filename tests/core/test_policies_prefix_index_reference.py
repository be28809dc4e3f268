"""The prefix index's fast paths answer exactly like the plain per-node LRU they replace.

``ReferenceIndex`` is the index as it was before the speed work: every insert refreshes an
ordered map per node. Random traffic (shared prefixes, repeated blocks, several caps, so both
the logging and the ordered mode, the switch and the log compaction all happen) must give the
same match, holders and block counts after every call.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

import pytest

from dataplane.core.load_view import NodeSet
from dataplane.core.policies.prefix_index import PrefixIndex

NODES = NodeSet([f"n{i}" for i in range(5)])


class CompactingIndex(PrefixIndex):
    """Compacts its logs often, so the test sees compaction before and after the switch."""

    LOG_SLACK = 2
    LOG_MIN = 16


class ReferenceIndex:
    def __init__(self, nodes: int, cap: int) -> None:
        self.cap = cap
        self.owners: dict[int, int] = {}
        self.lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(nodes)]

    def match(self, blocks: Sequence[int], allowed: int) -> tuple[int, int]:
        holders, depth = allowed, 0
        for block in blocks:
            held = self.owners.get(block, 0) & holders
            if not held:
                break
            holders, depth = held, depth + 1
        return (depth, holders) if depth else (0, 0)

    def insert(self, node: int, blocks: Sequence[int]) -> None:
        lru, bit = self.lru[node], 1 << node
        for block in reversed(blocks):
            if block in lru:
                lru.move_to_end(block)
            else:
                lru[block] = None
                self.owners[block] = self.owners.get(block, 0) | bit
        while len(lru) > self.cap:
            block, _ = lru.popitem(last=False)
            mask = self.owners[block] & ~bit
            if mask:
                self.owners[block] = mask
            else:
                del self.owners[block]


def chain(rng: random.Random) -> tuple[int, ...]:
    """A prompt: one of a few shared heads, then a private tail; now and then a repeated block."""
    head = [rng.randrange(8) * 1000 + i for i in range(rng.randrange(1, 6))]
    tail = [rng.randrange(400) for _ in range(rng.randrange(0, 8))]
    blocks = head + tail
    if rng.random() < 0.1 and blocks:
        blocks.append(rng.choice(blocks))
    return tuple(blocks)


@pytest.mark.parametrize("cap", [3, 40, 250, 430, 10_000])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", [PrefixIndex, CompactingIndex])
def test_random_traffic_gives_the_reference_answers_after_every_call(
    kind: type[PrefixIndex], cap: int, seed: int
) -> None:
    rng = random.Random(seed)
    fast, slow = kind(NODES, cap), ReferenceIndex(len(NODES.ids), cap)
    seen: set[int] = set()
    for _ in range(3000):
        blocks = chain(rng)
        seen.update(blocks)
        allowed = rng.randrange(1, 1 << len(NODES.ids))
        assert fast.match(blocks, allowed) == slow.match(blocks, allowed)
        node = rng.randrange(len(NODES.ids))
        fast.insert(node, blocks)
        slow.insert(node, blocks)
        assert [fast.block_count(n) for n in range(5)] == [len(lru) for lru in slow.lru]
        assert len(fast) == len(slow.owners)
    assert all(fast.holders(b) == slow.owners.get(b, 0) for b in seen)
