"""DualMap-style: two ring candidates per key, stick with the recent one unless it is overloaded.

Candidates (on the :mod:`.ring` of 256 virtual nodes per node):

* ``c1`` = the first eligible node clockwise from ``h1`` = the key hash;
* ``c2`` = the first eligible node other than ``c1`` clockwise from ``h2 = splitmix64(h1)``
  (none when only one node is eligible).

History: key hash → id of the node that served the key most recently (recorded in ``observe``),
an LRU capped at ``max_keys`` = 1,000,000 entries (the least recently served key is forgotten).
Ids, not indices, so history survives a membership change for the nodes that stay.

Rule, with ``cap`` = 1.25 (the same 25% slack as chwbl's epsilon):

1. if the recent node is one of the candidates and ``load[recent] <= cap * load[other] + 1``
   → the recent node, reason ``history``; the ``+ 1`` keeps an idle pair (0 vs 0, 1 vs 0) sticky;
2. otherwise → the less loaded candidate, ties to ``c1``: reason ``balance`` when a recent
   candidate existed (the request moves away from it), else ``ring`` (no usable history);
3. with a single eligible node → ``c1``, reason ``history`` if it is the recent one, else ``ring``.

A recent node that is no longer a candidate (it went unhealthy, or a recovery changed ``c1`` or
``c2``) counts as no history.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Policy, Reason, Request
from dataplane.core.policies.ring import VNODES, Ring, ring_for, splitmix64

CAP = 1.25
MAX_KEYS = 1_000_000


class DualMapPolicy(Policy):
    name = "dualmap"

    def __init__(
        self, *, seed: int = 0, cap: float = CAP, max_keys: int = MAX_KEYS, vnodes: int = VNODES
    ) -> None:
        super().__init__(seed=seed)
        if not (math.isfinite(cap) and cap >= 1.0):
            raise ValueError(f"cap must be a finite number >= 1, got {cap}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self.cap = cap
        self.max_keys = max_keys
        self.vnodes = vnodes
        self._ring: Ring | None = None
        self._history: OrderedDict[int, str] = OrderedDict()

    def candidates(self, key_hash: int, view: LoadView) -> tuple[int, int]:
        """``(c1, c2)``; ``c2`` is -1 when only one node is eligible."""
        ring = self._ring = ring_for(self._ring, view.nodes, self.vnodes)
        healthy, draining = view.healthy, view.draining
        c1 = ring.first_eligible(key_hash, healthy, draining)
        if len(view.eligible_nodes) == 1:
            return c1, -1
        return c1, ring.first_eligible(splitmix64(key_hash), healthy, draining, exclude=c1)

    def recent(self, key_hash: int, view: LoadView) -> int:
        """NodeSet index of the node that served the key last, or -1."""
        node_id = self._history.get(key_hash)
        return -1 if node_id is None else view.nodes.index.get(node_id, -1)

    def choose(self, request: Request, view: LoadView) -> Decision:
        if not view.eligible_nodes:
            raise NoEligibleNodeError("no healthy, undrained node")
        key_hash = request.key_hash
        c1, c2 = self.candidates(key_hash, view)
        recent = self.recent(key_hash, view)
        if c2 < 0:
            return Decision(c1, Reason.HISTORY if recent == c1 else Reason.RING)
        loads = view.loads
        if recent in (c1, c2):
            other = c2 if recent == c1 else c1
            if loads[recent] <= self.cap * loads[other] + 1.0:
                return Decision(recent, Reason.HISTORY)
        node = c1 if loads[c1] <= loads[c2] else c2
        if recent in (c1, c2):
            return Decision(node, Reason.HISTORY if node == recent else Reason.BALANCE)
        return Decision(node, Reason.RING)

    def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
        history = self._history
        key_hash = request.key_hash
        history[key_hash] = view.nodes.ids[decision.node]
        history.move_to_end(key_hash)
        if len(history) > self.max_keys:
            history.popitem(last=False)
