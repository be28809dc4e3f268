"""The explicit list of routing policies, selected by name (no import-time registration)."""

from __future__ import annotations

from typing import Any

from dataplane.core.policies.base import Policy
from dataplane.core.policies.cacheroute import (
    AffinityOnlyPolicy,
    CacheRoutePolicy,
    ReplicateRandomPolicy,
)
from dataplane.core.policies.cacheroute_online import CacheRouteOnlinePolicy
from dataplane.core.policies.chwbl import ChwblPolicy
from dataplane.core.policies.dualmap import DualMapPolicy
from dataplane.core.policies.flat import FlatPolicy
from dataplane.core.policies.preble import PreblePolicy
from dataplane.core.policies.sglang import SGLangPolicy
from dataplane.core.policies.sticky import StickyPolicy

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (  # BASELINES order, then ABLATIONS, then EXTENSIONS
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
    )
}

# The seven policies of the paper's comparison, in its table order; the rest are ablations.
BASELINES = ("flat", "sticky", "chwbl", "dualmap", "preble", "sglang", "cacheroute")
ABLATIONS = ("affinity_only", "replicate_random")
# Beyond the paper: the paper's dispatch with the bounded, session-aware online step (issue 22).
EXTENSIONS = ("cacheroute_online",)


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
