"""Routing policies: one small unit each, one explicit registry (:mod:`.registry`)."""

from dataplane.core.policies.base import Decision, Policy, Reason, Request
from dataplane.core.policies.registry import (
    DEFAULT_POLICY,
    POLICIES,
    UnknownPolicyError,
    make_policy,
)

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "Decision",
    "Policy",
    "Reason",
    "Request",
    "UnknownPolicyError",
    "make_policy",
]
