"""Preble-style: exploit the node that holds the longest prefix while its load is within 1.5x.

Rule (PAPER.md §4: "prefix history plus live load, load-cap factor 1.5"; DESIGN.md §4):

1. ``blocks`` = the request's prefix blocks, or ``(key_hash,)`` when it carries none.
2. Match them in the shared :class:`.prefix_index.PrefixIndex` over the eligible nodes:
   ``candidate`` = the eligible node with the longest matched prefix (ties: least loaded, then
   lowest index).
3. Exploit: if the matched depth is > 0 and ``load[candidate] + 1 <= cap * (min_load + 1)``
   (``cap`` = 1.5, ``min_load`` = the least eligible load; the ``+ 1`` counts the request being
   placed and keeps an idle cluster from reading 1 vs 0 as "infinitely" imbalanced) → the
   candidate, reason ``history``.
4. Otherwise explore: the least-loaded eligible node, ties broken at random by ``self.rng``;
   reason ``explore``. (Preble's "least-cost" node; with no per-request cost model here, load is
   the cost.)

``observe`` records the chosen node's blocks (whatever the reason), so an explored node becomes
the prefix's next holder. The per-node cap, ``max_blocks_per_node``, defaults to 40,071 blocks:
Preble mirrors what the engines actually cache, and that is one 70B TP2 destination's KV capacity
in 16-token blocks (PAPER.md testbed, CALIBRATION.md §1); the simulator should pass its profile's
capacity. A membership change resets the history (:mod:`.prefix_index`).
"""

from __future__ import annotations

import math

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from dataplane.core.policies.prefix_index import lightest

CAP = 1.5
MAX_BLOCKS_PER_NODE = 40_071


class PreblePolicy(PrefixHistoryPolicy):
    name = "preble"

    def __init__(
        self, *, seed: int = 0, cap: float = CAP, max_blocks_per_node: int = MAX_BLOCKS_PER_NODE
    ) -> None:
        super().__init__(seed=seed, max_blocks_per_node=max_blocks_per_node)
        if not (math.isfinite(cap) and cap >= 1.0):
            raise ValueError(f"cap must be a finite number >= 1, got {cap}")
        self.cap = cap

    def choose(self, request: Request, view: LoadView) -> Decision:
        eligible = view.eligible_nodes
        if not eligible:
            raise NoEligibleNodeError("no healthy, undrained node")
        blocks = request.prefix
        depth, holders = self.index(view).match(blocks, self.eligible_mask(view))
        loads = view.loads
        min_load = min(map(loads.__getitem__, eligible))
        if depth:
            candidate = lightest(holders, loads)
            if loads[candidate] + 1.0 <= self.cap * (min_load + 1.0):
                return Decision(candidate, Reason.HISTORY)
        idle = [node for node in eligible if loads[node] == min_load]
        node = idle[0] if len(idle) == 1 else self.rng.choice(idle)
        return Decision(node, Reason.EXPLORE)
