"""Sticky: consistent hashing of the key on a ring, no load bound (the paper's "Sticky" baseline).

Rule: the key's home is the first *eligible* (healthy, undrained) node clockwise from its key
hash on a ring of 256 virtual nodes per node (:mod:`.ring`). Reason ``ring``, always. An
ineligible node is skipped, not waited for, so its keys spread over its clockwise successors
(each of its ring arcs falls to a different neighbour) and come back when it recovers.

This is the affinity extreme: perfect key stability, and key skew maps straight onto node
queues, which is what the paper measures it for. Stateless apart from the cached ring.
"""

from __future__ import annotations

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Policy, Reason, Request
from dataplane.core.policies.ring import VNODES, Ring, ring_for


class StickyPolicy(Policy):
    name = "sticky"

    def __init__(self, *, seed: int = 0, vnodes: int = VNODES) -> None:
        super().__init__(seed=seed)
        self.vnodes = vnodes
        self._ring: Ring | None = None

    def choose(self, request: Request, view: LoadView) -> Decision:
        if not view.eligible_nodes:
            raise NoEligibleNodeError("no healthy, undrained node")
        ring = self._ring = ring_for(self._ring, view.nodes, self.vnodes)
        return Decision(
            ring.first_eligible(request.key_hash, view.healthy, view.draining), Reason.RING
        )
