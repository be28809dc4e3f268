"""Requests held open until they complete: the true in-flight count per node, and ``Release``.

A *hold* is a decision that counts as load on its node until the request ends, instead of
decaying after the correction horizon (:meth:`dataplane.core.load_view.LoadView.hold_last`). The
HTTP front holds every request it proxies and releases it when the response ends (finished,
failed, or the client went away). ``Route`` callers get the same with ``hold_until_release`` and a
``request_id``, then call ``Release(request_id)``; a named hold that is never released is dropped
after ``max_hold_s`` (the caller died), and at most ``max_named`` are kept (past that, a decision
is not held and decays as before).

``open_count`` is the number of held requests per (pool, node) that have not ended: exported as
``cacheroute_router_in_flight``. It survives a membership change of the pool (a new load view),
which the view's own held entries do not: the new view starts from its snapshot.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataplane.core.load_view import LoadView
from dataplane.core.route_input import RouteInput
from dataplane.core.router import RouteOutcome, Router

DEFAULT_MAX_HOLD_S = 600.0
DEFAULT_MAX_NAMED = 100_000


class Hold:
    """One held request: where it went and how to undo its load once it ends."""

    __slots__ = ("node", "node_id", "pool", "released", "taken_at", "token", "view")

    def __init__(
        self, pool: str, node_id: str, view: LoadView, node: int, token: int, taken_at: float
    ) -> None:
        self.pool = pool
        self.node_id = node_id
        self.view = view
        self.node = node
        self.token = token
        self.taken_at = taken_at
        self.released = False


class Holds:
    """Every hold of one router process (module docstring)."""

    def __init__(
        self,
        router: Router,
        *,
        max_hold_s: float = DEFAULT_MAX_HOLD_S,
        max_named: int = DEFAULT_MAX_NAMED,
    ) -> None:
        self._router = router
        self.max_hold_s = max_hold_s
        self.max_named = max_named
        self.open_count: dict[tuple[str, str], int] = {}
        self._named: OrderedDict[str, Hold] = OrderedDict()

    def take(self, inp: RouteInput, outcome: RouteOutcome, now: float) -> Hold:
        """Hold the decision the router just made for ``inp`` (same event-loop turn)."""
        view = self._router.pools[inp.pool].view
        return self.take_node(inp.pool, view, view.nodes.index[outcome.node_id], now)

    def take_node(self, pool: str, view: LoadView, node: int, now: float) -> Hold:
        """Hold the decision just recorded in ``view`` for ``node`` (a retry's second choice)."""
        node_id = view.nodes.ids[node]
        hold = Hold(pool, node_id, view, node, view.hold_last(node, now), now)
        key = (pool, node_id)
        self.open_count[key] = self.open_count.get(key, 0) + 1
        return hold

    def release(self, hold: Hold, now: float | None = None) -> bool:
        """End ``hold``: its load goes away; False when it had ended already."""
        if hold.released:
            return False
        hold.released = True
        hold.view.release(hold.token, time.time() if now is None else now)
        key = (hold.pool, hold.node_id)
        left = self.open_count.get(key, 0) - 1
        if left > 0:
            self.open_count[key] = left
        else:
            self.open_count.pop(key, None)
        return True

    # -- named holds (Route + Release) ----------------------------------------------------------

    def name(self, request_id: str, hold: Hold, now: float) -> bool:
        """Remember ``hold`` under ``request_id`` for ``Release``; False (and released) if full.

        A request id already held is released first: the caller reused it, and the older request
        can no longer be named.
        """
        self.expire(now)
        previous = self._named.pop(request_id, None)
        if previous is not None:
            self.release(previous, now)
        if len(self._named) >= self.max_named:
            self.release(hold, now)
            return False
        self._named[request_id] = hold
        return True

    def release_named(self, request_id: str, now: float | None = None) -> Hold | None:
        """``Release(request_id)``: the hold it ended, or None when no such hold is open (never
        held, expired, done)."""
        hold = self._named.pop(request_id, None)
        return hold if hold is not None and self.release(hold, now) else None

    def expire(self, now: float) -> int:
        """Release named holds older than ``max_hold_s`` (oldest first); returns how many."""
        named = self._named
        cutoff = now - self.max_hold_s
        expired = 0
        while named:
            request_id, hold = next(iter(named.items()))
            if hold.taken_at > cutoff:
                break
            del named[request_id]
            self.release(hold, now)
            expired += 1
        return expired

    @property
    def named(self) -> int:
        return len(self._named)


class InFlightCollector(Collector):
    """``cacheroute_router_in_flight{pool,node}``: held requests not ended, read at scrape time."""

    def __init__(self, holds: Holds) -> None:
        self._holds = holds

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "cacheroute_router_in_flight",
            "Requests this router dispatched and holds open until they end (HTTP front, "
            "Route with hold_until_release), per node.",
            labels=["pool", "node"],
        )
        for (pool, node), count in sorted(self._holds.open_count.items()):
            gauge.add_metric([pool, node], count)
        yield gauge
