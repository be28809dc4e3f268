"""Which ``Route`` calls count for planning: the caller's name and its per-client rate limit.

Off by default: every decision counts (the traffic reports feed the next plan's key rates).
With ``--auth-file`` (the control plane's format, :mod:`servekit.auth_file`) a caller is named
by its bearer token (``authorization: Bearer TOKEN``; any role) or its mTLS certificate subject,
and a caller with neither (or an unknown token) is **served but not counted**; without an auth
file a caller is its peer address (the host, without the port). With
``--planning-rate-limit R`` each named caller's counted requests are limited to R per second
(:mod:`dataplane.core.client_buckets`); the rest are served, not counted. Routing itself is
never refused here: this only decides what the control plane learns from.

``cacheroute_router_planning_uncounted_total{reason}`` counts the requests left out
(``unauthenticated``, ``over_limit``).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter

from dataplane.core.client_buckets import ClientBuckets
from dataplane.requests.callers import CallerNames
from servekit.auth_file import AuthTable

_Context = grpc.aio.ServicerContext[Any, Any]


class PlanningGate:
    """Decides how many of a call's requests count for planning (module docstring)."""

    def __init__(
        self, auth: AuthTable | None, rate_limit: float, registry: CollectorRegistry
    ) -> None:
        self._auth = auth
        self._buckets = ClientBuckets(rate_limit) if rate_limit > 0 else None
        self._names = CallerNames(auth)
        uncounted = Counter(
            "cacheroute_router_planning_uncounted",
            "Route requests served but not counted for planning: unauthenticated callers "
            "(with --auth-file) and callers over --planning-rate-limit.",
            ["reason"],
            registry=registry,
        )
        self._unauthenticated = uncounted.labels("unauthenticated")
        self._over_limit = uncounted.labels("over_limit")

    @staticmethod
    def enabled(auth: AuthTable | None, rate_limit: float) -> bool:
        return auth is not None or rate_limit > 0

    def counted(self, context: _Context, requests: int) -> int:
        """How many of the call's ``requests`` count (the first ones of a batch)."""
        client = self.client(context)
        if not client:
            self._unauthenticated.inc(requests)
            return 0
        if self._buckets is None:
            return requests
        granted = self._buckets.take(client, time.monotonic(), requests)
        if granted < requests:
            self._over_limit.inc(requests - granted)
        return granted

    def client(self, context: _Context) -> str:
        """The caller's name ("" when an auth file is set and the caller is not in it)."""
        return self._names.name(context)
