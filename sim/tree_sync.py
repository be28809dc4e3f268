"""Cross-router prefix-tree sync for prefix-history policies (the SGLang model gateway's mesh).

What is modelled, from smg-project/smg (PR #2119, "wire TreeSyncAdapter so cache-aware state
syncs across nodes", and ``crates/mesh/src/gossip_controller.rs``, ``model_gateway/src/mesh/
adapters/tree_sync.rs``): each gateway's cache-aware policy buffers a *tenant delta* per local
insert (a prefix-tree node and the worker that now caches it); the node-wide gossip loop ticks
once a second (1 Hz) and drains the buffer into one stream entry per model per round, broadcast to
every peer; a receiver applies each delta to its own tree. Here: every insert a router's policy
makes (the request's prefix blocks for the chosen node) is buffered and applied to every *other*
router's :class:`~dataplane.core.policies.prefix_index.PrefixIndex` at the next sync tick
(``interval_s``, default 1 s), so a delta arrives 0-1 s after the insert.

Not modelled: loads (the gateway does not sync them through the tree; each router keeps its own
view, as here), lost deltas and the repair protocol (``tree:req:``/``tree:page:``: an unknown
prefix is fetched from a peer; we apply every delta, which is the sync at its best), evictions
(only inserts travel), and the gossip's own latency beyond the tick.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.core.policies import Request
from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from sim.cluster_types import SimRouter

DEFAULT_SYNC_S = 1.0


class TreeSync:
    """Buffers each router's inserts and applies them to the other routers' trees per tick."""

    __slots__ = ("interval", "next_tick", "pending", "routers")

    def __init__(self, routers: Sequence[SimRouter], interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"tree sync interval must be > 0 s, got {interval_s}")
        self.routers = routers
        self.interval = interval_s
        self.next_tick = float("-inf")
        self.pending: list[tuple[int, int, tuple[int, ...]]] = []  # (router, node, prefix)

    @classmethod
    def for_routers(cls, routers: Sequence[SimRouter], interval_s: float | None) -> TreeSync | None:
        """A sync for prefix-history policies on several routers; None when there is nothing to
        sync (one router, a policy without a tree, or no interval)."""
        if interval_s is None or len(routers) < 2:
            return None
        if not isinstance(routers[0].policy, PrefixHistoryPolicy):
            return None
        return cls(routers, interval_s)

    def record(self, router: int, node: int, request: Request, now: float) -> None:
        if self.next_tick == float("-inf"):
            self.next_tick = now + self.interval
        self.pending.append((router, node, request.prefix))

    def tick(self, now: float) -> None:
        """Apply the buffered deltas once a tick is due (one gossip round)."""
        if now < self.next_tick or not self.pending:
            return
        while self.next_tick <= now:
            self.next_tick += self.interval
        pending, self.pending = self.pending, []
        for r, router in enumerate(self.routers):
            policy = router.policy
            assert isinstance(policy, PrefixHistoryPolicy)
            index = policy.index(router.view)
            insert = index.insert
            for source, node, prefix in pending:
                if source != r:
                    insert(node, prefix)
