"""The explicit list of routing policies, selected by name (no import-time registration)."""

from __future__ import annotations

from typing import Any

from dataplane.core.policies.base import Policy
from dataplane.core.policies.cacheroute import (
    AffinityOnlyPolicy,
    CacheRoutePolicy,
    ReplicateRandomPolicy,
)
from dataplane.core.policies.cacheroute_balanced import CacheRouteBalancedPolicy
from dataplane.core.policies.cacheroute_conversation import CacheRouteConversationPolicy
from dataplane.core.policies.cacheroute_online import CacheRouteOnlinePolicy
from dataplane.core.policies.chwbl import ChwblPolicy
from dataplane.core.policies.dualmap import DualMapPolicy
from dataplane.core.policies.flat import FlatPolicy
from dataplane.core.policies.preble import PreblePolicy
from dataplane.core.policies.sglang import SGLangPolicy
from dataplane.core.policies.smg import SmgEventsPolicy, SmgPolicy
from dataplane.core.policies.sticky import StickyPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (  # BASELINES order, then ABLATIONS, EXTENSIONS and BASELINES_2026
        FlatPolicy,
        StickyPolicy,
        ChwblPolicy,
        DualMapPolicy,
        PreblePolicy,
        SGLangPolicy,
        CacheRoutePolicy,
        AffinityOnlyPolicy,
        ReplicateRandomPolicy,
        CacheRouteOnlinePolicy,
        CacheRouteConversationPolicy,
        CacheRouteBalancedPolicy,
        SmgPolicy,
        SmgEventsPolicy,
    )
}

# The seven policies of the paper's comparison, in its table order; the rest are ablations.
BASELINES = ("flat", "sticky", "chwbl", "dualmap", "preble", "sglang", "cacheroute")
ABLATIONS = ("affinity_only", "replicate_random")
# Beyond the paper: the bounded, session-aware online step (issue 22) and conversation affinity
# without client help, with a tighter bound for placing a conversation than for keeping one
# (issue 30).
EXTENSIONS = ("cacheroute_online", "cacheroute_conversation", "cacheroute_balanced")
# The 2026 baselines (issue 30): the SGLang model gateway's current rule, and its KV-event mode
# (standing for the KV-event routers: SMG events, Dynamo's KV router, llm-d's precise scorer).
BASELINES_2026 = ("smg", "smg_events")


# What a router process runs unless told otherwise (``--policy``; the chart's and the local
# cluster's default too): conversation affinity with two bounds, which no client has to help
# (docs/results.md §7 has the evidence that made it the default; ``cacheroute`` stays the paper's
# dispatch under its own name).
DEFAULT_POLICY = "cacheroute_balanced"

# What a live router may run: every policy but those that read the engines' residency (KV
# events), which only the simulator supplies today.
ROUTER_POLICIES = tuple(name for name, cls in POLICIES.items() if not cls.needs_residency)


class UnknownPolicyError(ValueError):
    """A policy name that is not in the registry."""


def make_policy(name: str, *, seed: int = 0, **params: Any) -> Policy:
    """A fresh policy instance; ``params`` override the policy's documented defaults."""
    try:
        cls = POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise UnknownPolicyError(f"unknown policy {name!r}; known: {known}") from None
    return cls(seed=seed, **params)
