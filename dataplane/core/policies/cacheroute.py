"""CacheRoute dispatch (Algorithm 1, line 7) and its two ablations.

A warm key (in the table) goes to the least-loaded eligible member of its destination set; a key
the table does not hold, a warm key whose members are all unhealthy or drained, and every key
while there is no table go by power-of-two choices. The ablations dispatch the same way and
differ only in the table the planner builds for them (``placement``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.core.load_view import LoadView
from dataplane.core.policies.base import (
    Decision,
    Policy,
    Reason,
    Request,
    least_loaded,
    power_of_two,
)

_new = tuple.__new__


class CacheRoutePolicy(Policy):
    name = "cacheroute"
    placement = "lpt"

    def choose(self, request: Request, view: LoadView) -> Decision:
        bound = view.table
        if bound is None:
            return Decision(power_of_two(view, self.rng), Reason.NO_TABLE)
        members = bound.members(request.key_hash)
        if members is None:
            return Decision(power_of_two(view, self.rng), Reason.TAIL)
        if view.all_eligible and -1 not in members:  # the usual case: nothing to filter out
            eligible: Sequence[int] = members
        else:
            healthy, draining = view.healthy, view.draining
            eligible = [m for m in members if m >= 0 and healthy[m] and not draining[m]]
        if not eligible:
            return Decision(power_of_two(view, self.rng), Reason.FALLBACK_UNHEALTHY)
        # The warm path is the hot one: tuple.__new__ skips the NamedTuple constructor's frame.
        if len(eligible) == 1:
            return _new(Decision, (eligible[0], Reason.WARM))
        return _new(Decision, (least_loaded(view, eligible, request.key_hash), Reason.WARM))


class AffinityOnlyPolicy(CacheRoutePolicy):
    """Ablation: the warm set pinned to one hashed destination per key (no replication, no LPT)."""

    name = "affinity_only"
    placement = "hash"


class ReplicateRandomPolicy(CacheRoutePolicy):
    """Ablation: load-proportional replica counts, replicas placed at random (no LPT)."""

    name = "replicate_random"
    placement = "random"
