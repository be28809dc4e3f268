"""Flat-LB: power-of-two choices on load over eligible nodes, blind to keys and caches."""

from __future__ import annotations

from dataplane.core.load_view import LoadView
from dataplane.core.policies.base import Decision, Policy, Reason, Request, power_of_two


class FlatPolicy(Policy):
    name = "flat"

    def choose(self, request: Request, view: LoadView) -> Decision:
        return Decision(power_of_two(view, self.rng), Reason.P2C)
