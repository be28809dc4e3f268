"""The Endpoint Picker's decision: the router's own pick, kept inside the gateway's subset, plus
an ordered list of fallbacks for the gateway's retries.

Without a subset hint (or one that holds every eligible node) the pick *is* ``Router.route``:
the pool's policy, table, loads, holds and passive health, exactly as for ``Route`` and the HTTP
front. With a narrower hint the pick stays inside it: the least-loaded member of the key's
destination set that is in the subset (reason ``warm``), else the less loaded of two random
subset nodes (``p2c``); it is recorded in the view's in-flight correction like any decision (but
not counted for planning: the gateway, not the traffic, chose the subset). An empty intersection
is :class:`~dataplane.core.router.NoDestinationError` (the gateway answers 503).

Fallbacks, after the decision: the other eligible members of the key's destination set, least
loaded first, then the other eligible nodes, least loaded first (ties by node order, so replicas
with the same view give the same list), at most ``fallbacks`` of them, all inside the subset.

Every endpoint is checked to be ``HOST:PORT`` (:mod:`dataplane.core.addresses`) before it goes
into a header: the control plane refuses anything else, and a store that holds one anyway must not
inject a second endpoint (``evil,IP:PORT``) or a control character. A fallback that fails is left
out; a decision that fails is :class:`~dataplane.core.router.NoDestinationError`.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from dataplane.core.addresses import is_endpoint
from dataplane.core.load_view import LoadView
from dataplane.core.policies.base import Reason, least_loaded
from dataplane.core.route_input import RouteInput
from dataplane.core.router import NoDestinationError, RouteOutcome, Router, UnknownPoolError


class Pick(NamedTuple):
    """The decision and its fallbacks: node indices into ``view`` and the endpoints to dial."""

    outcome: RouteOutcome
    view: LoadView
    nodes: tuple[int, ...]
    endpoints: tuple[str, ...]


_CHECKED: dict[str, bool] = {}  # endpoint → valid, bounded (addresses change rarely)


def valid(endpoint: str) -> bool:
    found = _CHECKED.get(endpoint)
    if found is None:
        if len(_CHECKED) >= 4096:
            _CHECKED.clear()
        found = _CHECKED[endpoint] = is_endpoint(endpoint)
    return found


def endpoint(address: str) -> str:
    """The ``host:port`` a gateway dials for a node address (a URL's scheme and path dropped)."""
    for scheme in ("http://", "https://"):
        if address.startswith(scheme):
            return address[len(scheme) :].split("/", 1)[0]
    return address


def pick(
    router: Router,
    inp: RouteInput,
    now: float,
    *,
    subset: frozenset[str] | None,
    fallbacks: int,
    rng: random.Random,
    counted: bool = True,
) -> Pick:
    """Decide for ``inp`` (module docstring); raises the router's RouteError subclasses."""
    state = router.pools.get(inp.pool)
    if state is None:
        raise UnknownPoolError(f"pool {inp.pool!r} is not known to this router")
    view = state.view
    addresses = view.nodes.addresses
    allowed: tuple[int, ...] | None = None
    if subset is not None:
        allowed = tuple(n for n in view.eligible_nodes if endpoint(addresses[n]) in subset)
        if not allowed:
            raise NoDestinationError(
                f"pool {inp.pool!r} has no eligible destination among the gateway's subset of "
                f"{len(subset)} endpoints"
            )
        if len(allowed) == len(view.eligible_nodes):
            allowed = None
    if allowed is None:
        outcome = router.route(inp, now, counted)
        primary = view.nodes.index[outcome.node_id]
    else:
        primary, reason = _within(view, inp.key_hash, allowed, rng)
        view.record(primary, now)
        outcome = RouteOutcome(
            view.nodes.ids[primary],
            addresses[primary],
            reason,
            state.table_version,
            state.table_generation,
        )
    if not valid(endpoint(addresses[primary])):
        raise NoDestinationError(f"node {outcome.node_id!r} has an address that is not HOST:PORT")
    others = _others(view, inp.key_hash, primary, allowed, fallbacks)
    order = (primary, *(n for n in others if valid(endpoint(addresses[n]))))
    return Pick(outcome, view, order, tuple(endpoint(addresses[n]) for n in order))


def _within(
    view: LoadView, key_hash: int, allowed: tuple[int, ...], rng: random.Random
) -> tuple[int, Reason]:
    inside = set(allowed)
    table = view.table
    members = [m for m in (table.destinations(key_hash) or ()) if m in inside] if table else []
    if members:
        return least_loaded(view, members, key_hash), Reason.WARM
    if len(allowed) == 1:
        return allowed[0], Reason.P2C
    a, b = rng.sample(allowed, 2)
    return (a if view.loads[a] <= view.loads[b] else b), Reason.P2C


def _others(
    view: LoadView, key_hash: int, primary: int, allowed: tuple[int, ...] | None, count: int
) -> list[int]:
    if count <= 0:
        return []
    eligible = view.eligible_nodes if allowed is None else allowed
    inside = set(eligible)
    inside.discard(primary)
    loads = view.loads
    table = view.table
    members = [m for m in (table.destinations(key_hash) or ()) if m in inside] if table else []
    ranked = sorted(members, key=lambda m: (loads[m], m))
    rest = sorted(inside.difference(members), key=lambda m: (loads[m], m))
    return (ranked + rest)[:count]
