"""What a decision answers: the outcome a door relays, or the error that says why there is none.

Apart from the router (:mod:`dataplane.core.router`) so the pool state that caches outcomes and the
doors that read them need not import the decision itself.

Errors::

    RouteError
    ├── UnknownPoolError     the pool is not known to this router         → NOT_FOUND
    └── NoDestinationError   known pool, but no eligible destination      → UNAVAILABLE
"""

from __future__ import annotations

from typing import NamedTuple

from dataplane.core.policies import Reason


class RouteError(Exception):
    """A request the router cannot answer right now (the pool, not the request, is the cause)."""


class UnknownPoolError(RouteError, LookupError):
    """The pool is not in the store's pool set (nor "default")."""


class NoDestinationError(RouteError):
    """The pool has no healthy, undrained destination (or none at all yet)."""


class RouteOutcome(NamedTuple):
    """A decision as the caller sees it: where to go, why, by which table, and the session
    token that names this node under this table (:mod:`dataplane.core.session_token`)."""

    node_id: str
    address: str
    reason: Reason
    version: str
    generation: int
    session_token: str = ""
