"""CacheRoute with a bounded, session-aware online step (issue 22): the plan, corrected live.

The paper's dispatch (:mod:`.cacheroute`) never moves a warm key off its destination set, so when
60-second rate estimates misjudge a key its few replicas saturate together (the public-H100
cliff). This policy keeps the plan and adds three stateless rules, all under one load bound,
``bound = ceil((1 + epsilon) * (total + 1) / n)`` over the eligible nodes (the CHWBL bound,
:func:`.chwbl.load_bound`; loads are the view's: snapshot + this router's in-flight decisions):

1. **Session.** A request whose valid session token named node ``s`` (``Request.session``; the
   router validated pool and table generation) goes to ``s`` while it is eligible and
   ``load[s] + 1 <= bound``: a conversation stays on the node holding its history.
2. **Warm.** Else a warm key goes to the least-loaded eligible member of its set (as
   ``cacheroute``) if that member is within the bound.
3. **Spill.** Else walk the key's consistent-hash ring (:mod:`.ring`, the one key hash) and
   collect the first ``spread`` eligible nodes within the bound; pick one of them by
   ``splitmix64(flow ^ key_hash) % len``, where ``flow`` is the conversation id (the simulator)
   or the CRC-32 of the request id, else of the session token (the router).
   Routers that read the same snapshot then send different conversations to different ring
   nodes instead of all to the first (herding), while one conversation keeps one spill target.
   If no node is within the bound (possible only with fractional loads), the least-loaded
   eligible node.

Cold keys (not in the table) go by ``tail``: ``"p2c"`` (power-of-two choices, the paper's) or
``"chwbl"`` (the ring home within the bound, else the spill rule above). A warm key whose members
are all ineligible, and every key without a table, take the tail too.

With ``tail="chwbl"`` (the default) every decision is a deterministic function of (table, load
view, request): two routers given the same inputs decide the same. With ``"p2c"`` only tail
decisions draw from ``self.rng``. Defaults, FROZEN on tuning seeds 2-3 only (docs/results.md §5,
``docs/results/tuning_online_seeds2-3.json``): ``EPSILON`` 0.75 (0.5 lost a testbed seed at
160 QPS; 1.0 was run on the testbed only), ``SPREAD`` 2 (vs 4 at 16 routers), ``TAIL`` "chwbl"
(p99 at top-K256, 160 QPS: 3.81 / 3.54 s vs p2c's 3.88 / 3.69 s).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import (
    Decision,
    Policy,
    Reason,
    Request,
    least_loaded,
    power_of_two,
)
from dataplane.core.policies.chwbl import load_bound
from dataplane.core.policies.ring import VNODES, Ring, ring_for, splitmix64

EPSILON = 0.75
SPREAD = 2
TAIL = "chwbl"
TAILS = ("p2c", "chwbl")
ORDER_MEMO_LIMIT = 65_536

_new = tuple.__new__
_ceil = math.ceil


class CacheRouteOnlinePolicy(Policy):
    name = "cacheroute_online"
    placement = "lpt"
    needs_session = True

    def __init__(
        self,
        *,
        seed: int = 0,
        epsilon: float = EPSILON,
        spread: int = SPREAD,
        tail: str = TAIL,
        vnodes: int = VNODES,
    ) -> None:
        super().__init__(seed=seed)
        if not (math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon}")
        if spread < 1:
            raise ValueError(f"spread must be >= 1, got {spread}")
        if tail not in TAILS:
            raise ValueError(f"tail must be one of {', '.join(TAILS)}, got {tail!r}")
        self.epsilon = epsilon
        self._factor = 1.0 + epsilon
        self.spread = spread
        self.tail = tail
        self.vnodes = vnodes
        self._ring: Ring | None = None
        # key hash → its ring's distinct nodes in clockwise order, for the ring above (a spilled
        # key is usually hot, so it spills again: a dict lookup instead of a ring walk)
        self._orders: dict[int, tuple[int, ...]] = {}

    def _ring_order(self, view: LoadView, key_hash: int) -> tuple[int, ...]:
        ring = ring_for(self._ring, view.nodes, self.vnodes)
        if ring is not self._ring:
            self._ring = ring
            self._orders = {}
        orders = self._orders
        order = orders.get(key_hash)
        if order is None:
            if len(orders) >= ORDER_MEMO_LIMIT:
                orders.clear()
            order = orders[key_hash] = tuple(ring.walk(key_hash))
        return order

    def choose(self, request: Request, view: LoadView) -> Decision:
        loads = view.loads
        if view.all_eligible:  # load_bound inlined: this is every decision's cost
            bound = _ceil(self._factor * (sum(loads) + 1.0) / len(loads))
        else:
            bound = load_bound(view, self.epsilon)
        session = request.session
        if session >= 0 and loads[session] + 1.0 <= bound and view.is_eligible(session):
            return _new(Decision, (session, Reason.SESSION))
        table = view.table
        members = None if table is None else table.members(request.key_hash)
        if members is None:
            return self._tail(request, view, bound, Reason.NO_TABLE if table is None else None)
        if view.all_eligible and -1 not in members:
            eligible: Sequence[int] = members
        else:
            eligible = [m for m in members if view.is_eligible(m)]
            if not eligible:
                return self._tail(request, view, bound, Reason.FALLBACK_UNHEALTHY)
        return self._warm(request, view, eligible, bound)

    def _warm(
        self, request: Request, view: LoadView, eligible: Sequence[int], bound: int
    ) -> Decision:
        """A warm key with eligible members: the least loaded within the bound, else a spill."""
        best = eligible[0] if len(eligible) == 1 else least_loaded(view, eligible, request.key_hash)
        if view.loads[best] + 1.0 <= bound:
            return _new(Decision, (best, Reason.WARM))
        return Decision(self._spill(request, view, bound), Reason.SPILL)

    def _tail(self, request: Request, view: LoadView, bound: int, why: Reason | None) -> Decision:
        if self.tail == "p2c":
            return Decision(power_of_two(view, self.rng), why or Reason.TAIL)
        healthy, draining = view.healthy, view.draining
        home = next(
            (n for n in self._ring_order(view, request.key_hash) if healthy[n] and not draining[n]),
            -1,
        )
        if home < 0:
            raise NoEligibleNodeError("no healthy, undrained node on the ring")
        if view.loads[home] + 1.0 <= bound:
            return Decision(home, why or Reason.RING)
        return Decision(self._spill(request, view, bound), why or Reason.RING_SPILL)

    def _spill(self, request: Request, view: LoadView, bound: int) -> int:
        """One of the first ``spread`` eligible ring nodes within the bound, by the flow's hash."""
        eligible = view.eligible_nodes
        if not eligible:
            raise NoEligibleNodeError("no healthy, undrained node")
        loads, healthy, draining = view.loads, view.healthy, view.draining
        limit = bound - 1.0
        spread = self.spread
        found: list[int] = []
        for node in self._ring_order(view, request.key_hash):
            if loads[node] <= limit and healthy[node] and not draining[node]:
                found.append(node)
                if len(found) == spread:
                    break
        if not found:
            return least_loaded(view, eligible, request.key_hash)
        if len(found) == 1:
            return found[0]
        flow = request.flow
        if isinstance(flow, str):  # the router's request id or token: hashed only on a spill
            flow = zlib.crc32(flow.encode("utf-8"))
        return found[splitmix64(flow ^ request.key_hash) % len(found)]
