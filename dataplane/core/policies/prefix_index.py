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
    """Per-node block LRUs plus a global block → owner-bitmask map (module docstring).

    Speed (same answers): a node's LRU order matters only once it must evict. Until its block
    count first exceeds the cap, a node keeps a *touch log* instead (the blocks in touch order,
    appended in C) and a count of its distinct blocks; the owner mask says whether a block is
    new to it. The LRU order is then rebuilt from the log (order of last touch, exactly what
    refreshing each block in turn gives) and kept as an ordered map from there on. The log is
    compacted to its distinct blocks whenever it grows past ``LOG_SLACK`` times their number, so
    it stays bounded. An index whose cap is never reached (SGLang's 2**20 blocks per node) never
    orders.
    """

    LOG_SLACK = 4  # a logging node's log is compacted past this many times its distinct blocks
    LOG_MIN = 4096  # ... plus this many entries

    __slots__ = ("_count", "_log", "_lru", "_owners", "max_blocks_per_node", "nodes")

    def __init__(self, nodes: NodeSet, max_blocks_per_node: int) -> None:
        if max_blocks_per_node < 1:
            raise ValueError(f"max_blocks_per_node must be >= 1, got {max_blocks_per_node}")
        self.nodes = nodes
        self.max_blocks_per_node = max_blocks_per_node
        self._owners: dict[int, int] = {}
        count = len(nodes.ids)
        self._lru: list[OrderedDict[int, None] | None] = [None] * count  # None: still logging
        self._log: list[list[int]] = [[] for _ in range(count)]
        self._count = [0] * count  # distinct blocks of a logging node

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
        bit = 1 << node
        if lru is None:
            new = 0
            for block in blocks:
                mask = owners.get(block, 0)
                if not mask & bit:
                    owners[block] = mask | bit
                    new += 1
            log = self._log[node]
            log.extend(reversed(blocks))  # deepest first: the root ends most recently used
            count = self._count[node] = self._count[node] + new
            if count <= self.max_blocks_per_node:
                if len(log) > self.LOG_SLACK * count + self.LOG_MIN:
                    log[:] = _by_last_touch(log)
                return
            lru = self._lru[node] = OrderedDict.fromkeys(_by_last_touch(log))
            self._log[node] = []
        else:
            refresh = lru.move_to_end
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
        lru = self._lru[node]
        return self._count[node] if lru is None else len(lru)

    def holders(self, block: int) -> int:
        """Bitmask of the nodes holding ``block``."""
        return self._owners.get(block, 0)

    def __len__(self) -> int:
        """Distinct blocks held by any node."""
        return len(self._owners)


def _by_last_touch(log: list[int]) -> list[int]:
    """The distinct blocks of a touch log, least recently touched first."""
    newest_first = list(dict.fromkeys(reversed(log)))
    newest_first.reverse()
    return newest_first


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
