"""CHWBL: consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA 2018).

Rule, with ``epsilon`` = 0.25 (the paper's setting; KubeAI's "125% of mean"):

* over the eligible (healthy, undrained) nodes: ``total`` = the sum of ``view.loads``,
  ``n`` = their number, ``bound = ceil((1 + epsilon) * (total + 1) / n)``;
* a node *qualifies* if ``load + 1 <= bound``, i.e. the load it would have after taking this
  request stays within the bound (the ``+ 1`` on both sides counts the request being placed, as
  the algorithm does; DESIGN.md §4's shorthand ``load <= bound`` omits it);
* walk the ring (:mod:`.ring`, 256 virtual nodes per node) clockwise from the key hash over
  distinct eligible nodes; the first that qualifies wins. Reason ``ring`` if it is the key's home
  (the first eligible node clockwise), else ``ring_spill``;
* with integer loads some node always qualifies (the least-loaded one); with fractional loads
  (a fractional snapshot) possibly none does, and then the least-loaded eligible node wins (ties
  rotate by key hash, :func:`.base.least_loaded`), reason ``ring`` if that is the home, else
  ``ring_spill``.

Stateless apart from the cached ring; every load read is the view's (snapshot + in-flight).
"""

from __future__ import annotations

import math

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Policy, Reason, Request, least_loaded
from dataplane.core.policies.ring import VNODES, Ring, ring_for

EPSILON = 0.25


def load_bound(view: LoadView, epsilon: float) -> int:
    """``ceil((1 + epsilon) * (total + 1) / n)``: the bounded-load cap over the eligible nodes.

    Shared by chwbl and cacheroute_online, so both bound loads the same way. ``sum(loads)`` when
    every node is eligible (the usual case: one C call instead of a Python-level map).
    """
    eligible = view.eligible_nodes
    if not eligible:
        raise NoEligibleNodeError("no healthy, undrained node")
    loads = view.loads
    total = sum(loads) if view.all_eligible else sum(map(loads.__getitem__, eligible))
    return math.ceil((1.0 + epsilon) * (total + 1.0) / len(eligible))


class ChwblPolicy(Policy):
    name = "chwbl"

    def __init__(self, *, seed: int = 0, epsilon: float = EPSILON, vnodes: int = VNODES) -> None:
        super().__init__(seed=seed)
        if not (math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
        self.epsilon = epsilon
        self.vnodes = vnodes
        self._ring: Ring | None = None

    def bound(self, view: LoadView) -> int:
        """``ceil((1 + epsilon) * (total + 1) / n)`` over the eligible nodes."""
        return load_bound(view, self.epsilon)

    def choose(self, request: Request, view: LoadView) -> Decision:
        eligible = view.eligible_nodes
        if not eligible:
            raise NoEligibleNodeError("no healthy, undrained node")
        ring = self._ring = ring_for(self._ring, view.nodes, self.vnodes)
        bound = self.bound(view)
        loads, healthy, draining = view.loads, view.healthy, view.draining
        key_hash = request.key_hash
        home = ring.first_eligible(key_hash, healthy, draining)
        if loads[home] + 1.0 <= bound:
            return Decision(home, Reason.RING)  # the common case: no walk
        for node in ring.walk(key_hash):
            if healthy[node] and not draining[node] and loads[node] + 1.0 <= bound:
                return Decision(node, Reason.RING_SPILL)  # node != home: home did not qualify
        node = least_loaded(view, eligible, key_hash)
        return Decision(node, Reason.RING if node == home else Reason.RING_SPILL)
