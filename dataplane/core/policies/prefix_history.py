"""Base of the policies that learn which node served which prefix (preble, sglang)."""

from __future__ import annotations

from dataplane.core.load_view import LoadView
from dataplane.core.policies.base import Decision, Policy, Request
from dataplane.core.policies.prefix_index import EligibleMask, PrefixIndex, index_for


class PrefixHistoryPolicy(Policy):
    """Keeps a :class:`PrefixIndex` per NodeSet and records each decision's prefix in it."""

    needs_blocks = True

    def __init__(self, *, seed: int, max_blocks_per_node: int) -> None:
        super().__init__(seed=seed)
        self.max_blocks_per_node = max_blocks_per_node
        self._index: PrefixIndex | None = None
        self._mask = EligibleMask()

    def index(self, view: LoadView) -> PrefixIndex:
        """The prefix index of the view's NodeSet (a fresh one after a membership change)."""
        index = self._index = index_for(self._index, view.nodes, self.max_blocks_per_node)
        return index

    def eligible_mask(self, view: LoadView) -> int:
        return self._mask.of(view.eligible_nodes)

    def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
        self.index(view).insert(decision.node, request.prefix)
