"""A consistent-hash ring over a NodeSet, shared by the sticky, chwbl and dualmap policies.

Each node owns ``vnodes`` (default 256) points, point ``i`` of node ``id`` at
``hash_key(f"{id}#{i}")``: the project's one key hash, so any router, the simulator and an
operator tool place a node's points identically. A key hash looks up the first point at or after
it (``bisect_left``, wrapping past the largest point to the smallest) and walks clockwise from
there. Equal points (a 64-bit collision) sort by node index, so the order is still deterministic.

With 256 points per node, each node owns about 1/n of the hash space (relative spread ≈ 1/16),
and adding a node moves only the keys the new node takes over (≈ 1/(n+1) of them).

A ring is built lazily and cached per NodeSet *object* (``ring_for``): a membership change makes
a new NodeSet, and so a new ring.

``splitmix64`` (Steele, Lea and Flood's SplitMix64 finaliser, as in ``java.util.SplittableRandom``)
derives a second, independent hash of a key (dualmap's second candidate) from its key hash.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from dataplane.core.keys import hash_key
from dataplane.core.load_view import NodeSet, NoEligibleNodeError

VNODES = 256
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 of a uint64: ``splitmix64(0) == 0xE220A8397B1DCDAF``."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class Ring:
    """Sorted ring points and the NodeSet index that owns each one."""

    __slots__ = ("nodes", "owners", "points", "vnodes")

    def __init__(self, nodes: NodeSet, vnodes: int = VNODES) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {vnodes}")
        pairs = sorted(
            (hash_key(f"{node}#{i}"), index)
            for index, node in enumerate(nodes.ids)
            for i in range(vnodes)
        )
        self.nodes = nodes
        self.vnodes = vnodes
        self.points: list[int] = [point for point, _ in pairs]
        self.owners: list[int] = [owner for _, owner in pairs]

    def position(self, key_hash: int) -> int:
        """Index of the first point clockwise from ``key_hash`` (at or after it, wrapping)."""
        pos = bisect_left(self.points, key_hash)
        return 0 if pos == len(self.points) else pos

    def walk(self, key_hash: int) -> Iterator[int]:
        """Distinct owners in clockwise order from ``key_hash``; every node exactly once."""
        owners = self.owners
        size = len(owners)
        if size == 0:
            return
        start = self.position(key_hash)
        remaining = len(self.nodes)
        seen = 0
        for step in range(size):
            node = owners[(start + step) % size]
            bit = 1 << node
            if seen & bit:
                continue
            seen |= bit
            yield node
            remaining -= 1
            if remaining == 0:
                return

    def first_eligible(
        self,
        key_hash: int,
        healthy: Sequence[bool],
        draining: Sequence[bool],
        exclude: int = -1,
    ) -> int:
        """First healthy, undrained node clockwise from ``key_hash`` other than ``exclude``."""
        if self.owners:
            node = self.owners[self.position(key_hash)]  # the common case: the owner is fine
            if node != exclude and healthy[node] and not draining[node]:
                return node
        for node in self.walk(key_hash):
            if node != exclude and healthy[node] and not draining[node]:
                return node
        raise NoEligibleNodeError("no healthy, undrained node on the ring")


def ring_for(cached: Ring | None, nodes: NodeSet, vnodes: int = VNODES) -> Ring:
    """``cached`` if it was built for this very NodeSet object, else a fresh ring for ``nodes``.

    Each policy keeps its own ring (no module-level state); building one costs ~10 ms for 30 nodes
    and happens once per membership change.
    """
    if cached is not None and cached.nodes is nodes and cached.vnodes == vnodes:
        return cached
    return Ring(nodes, vnodes)
