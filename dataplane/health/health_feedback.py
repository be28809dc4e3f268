"""Whose outcomes count for passive health, and how much one caller may eject.

``Route(hold_until_release)`` + ``Release(outcome=CONNECT_FAILED)`` needed no token: 3.7 s of
anonymous calls took 2 of 4 engines out of rotation for 30 s; 40 ext_proc streams naming a
pick's last fallback as the endpoint that served ejected 2 of 4 as well. Both doors' outcomes
(``Release`` and the Endpoint Picker's response headers) now go through this one rule:

* with ``--auth-file``, only callers it names (bearer token or mTLS subject, any role) report
  outcomes; an unknown caller's outcome is ignored (its hold is still released);
* with ``--health-feedback-from CIDR,...``, callers whose peer address lies in one of the
  networks count too (named by their host), and without an auth file only they do;
* with neither, only loopback callers count (named by their peer host), unless
  ``--health-feedback-anonymous`` lets every caller count (a private network);
* whoever the caller is, at most ``max(1, floor(share x undrained destinations))`` of a pool's
  destinations may be ejected *through its reports* at once (``--health-feedback-share``,
  default 0.25); a further failure it reports is ignored until one of them returns.

Successes count under the same identity rule (they cannot eject, but they reset a failing
destination's count). The HTTP front's own attempts are the router's and always count.
``cacheroute_router_health_feedback_ignored_total{reason}`` counts what was left out
(``unauthenticated``, ``caller_share``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter

from dataplane.core.router import Router
from dataplane.health.passive_health import PassiveHealth

_Context = grpc.aio.ServicerContext[Any, Any]
DEFAULT_SHARE = 0.25
MAX_CALLERS = 4096


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> tuple[Network, ...]:
    """``--health-feedback-from``: comma-separated CIDRs (ValueError naming a bad one)."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if item:
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"--health-feedback-from {item!r}: {exc}") from None
    return tuple(networks)


def peer_ip(context: _Context) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The caller's IP from gRPC's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` peer string."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def allow_listed(
    name_of: Callable[[_Context], str],
    networks: Sequence[Network],
    authenticated: bool,
    *,
    anonymous: bool = False,
) -> Callable[[_Context], str]:
    """``name_of`` extended by the allow-list (module docstring). Without authentication and
    without networks, only loopback peers are named, unless ``anonymous``."""
    if authenticated and not networks:
        return name_of
    if not authenticated and not networks and anonymous:
        return name_of

    def name(context: _Context) -> str:
        found = name_of(context) if authenticated else ""
        if found:
            return found
        ip = peer_ip(context)
        if ip is None:
            return ""
        if any(ip in n for n in networks) or (not (authenticated or networks) and ip.is_loopback):
            return str(ip)
        return ""

    return name


class HealthFeedback:
    """Applies ``Release`` outcomes to passive health under the rule above."""

    def __init__(
        self,
        router: Router,
        health: PassiveHealth,
        name_of: Callable[[_Context], str],
        registry: CollectorRegistry,
        share: float = DEFAULT_SHARE,
    ) -> None:
        self._router = router
        self._health = health
        self._name_of = name_of  # "" : not authenticated
        self.share = share
        self._ejected_by: dict[str, set[tuple[str, str]]] = {}
        ignored = Counter(
            "cacheroute_router_health_feedback_ignored",
            "Release outcomes not applied to passive health: unknown callers (with --auth-file) "
            "and callers at their share of ejections.",
            ["reason"],
            registry=registry,
        )
        self._unauthenticated = ignored.labels("unauthenticated")
        self._over_share = ignored.labels("caller_share")

    def cap(self, pool: str) -> int:
        state = self._router.pools.get(pool)
        members = len(state.view.eligible_nodes) if state is not None else 0
        members += len(state.outliers.ejected) if state is not None else 0
        return max(1, math.floor(self.share * members))

    def caller(self, context: _Context) -> str:
        """The name a call's outcomes count under ("": they do not count)."""
        return self._name_of(context)

    def report(self, context: _Context, pool: str, node_id: str, cause: str | None) -> bool:
        """Apply one outcome (``cause`` None: success); whether it counted."""
        return self.report_as(self._name_of(context), pool, node_id, cause)

    def report_as(self, caller: str, pool: str, node_id: str, cause: str | None) -> bool:
        """:meth:`report` for a caller named already (an ext_proc stream names it once)."""
        if not caller:
            self._unauthenticated.inc()
            return False
        if cause is None:
            self._health.succeeded(pool, node_id)
            return True
        state = self._router.pools.get(pool)
        ejected_now = state.outliers.ejected if state is not None else frozenset()
        mine = {
            (p, n) for p, n in self._ejected_by.get(caller, set()) if n in ejected_now or p != pool
        }
        ours_here = sum(1 for p, _ in mine if p == pool)
        if node_id not in ejected_now and ours_here >= self.cap(pool):
            self._over_share.inc()
            return False
        self._health.failed(pool, node_id, cause)
        if state is not None and node_id in state.outliers.ejected and node_id not in ejected_now:
            mine.add((pool, node_id))
        if mine:
            if len(self._ejected_by) >= MAX_CALLERS and caller not in self._ejected_by:
                self._ejected_by.clear()
            self._ejected_by[caller] = mine
        else:
            self._ejected_by.pop(caller, None)
        return True
