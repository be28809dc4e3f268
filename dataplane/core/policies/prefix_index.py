"""Approximate per-node prefix ownership, shared by the preble and sglang policies.

What a history-based router can know without asking the engines: which prefix blocks it sent to
which node recently. Per node, an LRU of the block hashes it recently served, at most
``max_blocks_per_node``; globally, ``block → bitmask of the nodes holding it``. The pair stands in
for a radix tree per node: blocks are chained hashes (equal block ⇒ equal prefix up to it), so
"node holds blocks[0..d)" is a walk over ``d`` dict lookups.

* ``match(blocks, allowed)`` walks from the first block, intersecting owner masks with
  ``allowed``, and returns ``(depth, holders)``: the longest leading run held by one allowed node
  and the mask of allowed nodes holding all of it (``(0, 0)`` when no allowed node holds the
  first block). ~75 blocks cost ~75 dict lookups, and the walk stops at the first miss.
* ``insert(node, blocks)`` refreshes the node's LRU and sets its bit. Blocks are touched deepest
  first, so a prefix's root is the most recently used: eviction takes tails before roots, as a
  radix tree evicts leaves first, and "held" stays (nearly) prefix-closed.
* Eviction (whenever a node's LRU exceeds its cap) clears the node's bit; a block no node holds
  is forgotten.

The index is keyed by NodeSet position, so it belongs to one NodeSet object: policies build a
fresh (empty) index when the view's NodeSet changes identity. A membership change therefore forgets
all history, as a restarted router would; that costs a short re-learning period (the engines'
caches are unchanged) and never maps a block to the wrong node.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from dataplane.core.load_view import NodeSet


class PrefixIndex:
    """Per-node block LRUs plus a global block → owner-bitmask map (module docstring)."""

    __slots__ = ("_lru", "_owners", "max_blocks_per_node", "nodes")

    def __init__(self, nodes: NodeSet, max_blocks_per_node: int) -> None:
        if max_blocks_per_node < 1:
            raise ValueError(f"max_blocks_per_node must be >= 1, got {max_blocks_per_node}")
        self.nodes = nodes
        self.max_blocks_per_node = max_blocks_per_node
        self._owners: dict[int, int] = {}
        self._lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in nodes.ids]

    def match(self, blocks: Sequence[int], allowed: int) -> tuple[int, int]:
        """``(depth, holders)``: longest leading run held by an allowed node, and who holds it."""
        owners = self._owners
        holders = allowed
        depth = 0
        for block in blocks:
            held = owners.get(block, 0) & holders
            if not held:
                break
            holders = held
            depth += 1
        return (depth, holders) if depth else (0, 0)

    def insert(self, node: int, blocks: Sequence[int]) -> None:
        """Record that ``node`` served ``blocks`` now (refresh, set bits, evict past the cap)."""
        lru = self._lru[node]
        owners = self._owners
        refresh = lru.move_to_end
        bit = 1 << node
        for block in reversed(blocks):  # deepest first: the root ends most recently used
            if block in lru:
                refresh(block)
            else:
                lru[block] = None
                owners[block] = owners.get(block, 0) | bit
        excess = len(lru) - self.max_blocks_per_node
        if excess > 0:
            keep = ~bit
            for _ in range(excess):
                block, _none = lru.popitem(last=False)
                mask = owners[block] & keep
                if mask:
                    owners[block] = mask
                else:
                    del owners[block]

    def block_count(self, node: int) -> int:
        """Blocks recorded for ``node`` (SGLang's "tree size")."""
        return len(self._lru[node])

    def holders(self, block: int) -> int:
        """Bitmask of the nodes holding ``block``."""
        return self._owners.get(block, 0)

    def __len__(self) -> int:
        """Distinct blocks held by any node."""
        return len(self._owners)


def index_for(cached: PrefixIndex | None, nodes: NodeSet, max_blocks_per_node: int) -> PrefixIndex:
    """``cached`` if it belongs to this very NodeSet object, else a fresh, empty index."""
    if cached is not None and cached.nodes is nodes:
        return cached
    return PrefixIndex(nodes, max_blocks_per_node)


class EligibleMask:
    """Bitmask of ``view.eligible_nodes``, recomputed only when the view installs a new tuple.

    ``LoadView.set_states`` replaces ``eligible_nodes`` with a new tuple, so identity says whether
    the mask is still current.
    """

    __slots__ = ("_mask", "_source")

    def __init__(self) -> None:
        self._source: Sequence[int] | None = None
        self._mask = 0

    def of(self, eligible: Sequence[int]) -> int:
        if eligible is not self._source:
            mask = 0
            for node in eligible:
                mask |= 1 << node
            self._source, self._mask = eligible, mask
        return self._mask


def lightest(mask: int, loads: Sequence[float]) -> int:
    """Least-loaded node of a non-empty bitmask; ties go to the lowest index."""
    best = -1
    best_load = 0.0
    while mask:
        low = mask & -mask
        node = low.bit_length() - 1
        mask ^= low
        load = loads[node]
        if best < 0 or load < best_load:
            best, best_load = node, load
    return best
