"""The routing-policy interface shared by the live router and the simulator.

A policy answers one question, ``choose(request, view) -> Decision``, from the request's key hash
(and, for prefix-history policies, its chained prefix blocks) and the router's :class:`LoadView`.
Policies that learn from history update it in ``observe`` after the caller committed to the
decision. A policy is deterministic given its seed and the sequence of calls.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import StrEnum
from typing import ClassVar, NamedTuple, Protocol

from dataplane.core.load_view import LoadView, NoEligibleNodeError


class Reason(StrEnum):
    """Why a destination was chosen (mirrors ``cacheroute.v1.RouteReason``)."""

    WARM = "warm"
    TAIL = "tail"
    FALLBACK_UNHEALTHY = "fallback_unhealthy"
    NO_TABLE = "no_table"
    P2C = "p2c"
    RING = "ring"
    RING_SPILL = "ring_spill"
    HISTORY = "history"
    EXPLORE = "explore"
    CACHE_MATCH = "cache_match"
    CACHE_MISS = "cache_miss"
    BALANCE = "balance"
    SESSION = "session"
    SPILL = "spill"


class Request(NamedTuple):
    """What a policy knows about a request.

    ``blocks`` are chained prefix-block hashes, oldest first (empty when unknown); prefix-history
    policies fall back to the key hash as a one-block prefix when there are none.

    ``session`` is the node (NodeSet index) a valid session token named, -1 without one; the
    router validates tokens (:mod:`dataplane.core.session_token`), so a policy sees only a node
    index. ``flow`` identifies the conversation (or the request) for policies that spread spills
    (:mod:`.cacheroute_online`): an int (the simulator's conversation id) or a string the policy
    hashes only when it needs to (the router's request id or session token); 0 when unknown.
    ``opening``: the request opens its conversation (its prompt holds no earlier turn, so no
    node holds a history of it); False when unknown. Both this and the above are only filled in
    for policies that declare ``needs_session``; the others get the defaults.
    """

    key_hash: int
    blocks: tuple[int, ...] = ()
    session: int = -1
    flow: int | str = 0
    opening: bool = False

    @property
    def prefix(self) -> tuple[int, ...]:
        """The blocks, or the key hash as a one-block prefix when the blocks are unknown."""
        return self.blocks or (self.key_hash,)


class Residency(Protocol):
    """What the engines hold (KV events): per node, the length of the request's leading run of
    resident blocks. Attached to policies that declare ``needs_residency``."""

    def resident_prefix(self, node: int, blocks: Sequence[int]) -> int: ...


class Decision(NamedTuple):
    """A destination (index into the view's NodeSet) and the reason for it."""

    node: int
    reason: Reason


class Policy:
    """Base class: a name, a seeded RNG, ``choose`` and an optional ``observe``.

    ``placement`` names the table a policy needs ("lpt", "hash", "random"), or None when it
    routes without one; the simulator builds that table the way the control plane would.
    """

    name: ClassVar[str]
    placement: ClassVar[str | None] = None
    # Whether ``choose``/``observe`` read ``Request.blocks``; when False the router does not hash
    # the prompt into blocks for this policy (they cost ~60 µs for a 4 KiB prompt).
    needs_blocks: ClassVar[bool] = False
    # Whether ``choose`` reads ``Request.session``/``flow``; when False the router does not look
    # the session token up or hash the flow for this policy.
    needs_session: ClassVar[bool] = False
    # Whether ``choose`` reads the engines' resident prefixes (KV events); the caller then attaches
    # a ``residency`` source (the simulator: its engines' caches).
    needs_residency: ClassVar[bool] = False
    residency: Residency | None = None
    # Whether the class overrides ``observe`` (set per subclass): the stateless policies' route
    # skips the no-op call, one Python frame per decision.
    observes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.observes = cls.observe is not Policy.observe

    def __init__(self, *, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def choose(self, request: Request, view: LoadView) -> Decision:
        raise NotImplementedError

    def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
        """Learn from a decision the caller acted on (no-op for stateless policies)."""

    def route(self, request: Request, view: LoadView, now: float) -> Decision:
        """choose + observe + count the decision in the view's in-flight correction."""
        decision = self.choose(request, view)
        if self.observes:
            self.observe(request, decision, view)
        view.record(decision[0], now)
        return decision


def power_of_two(view: LoadView, rng: random.Random) -> int:
    """Power-of-two choices: the less loaded of two distinct random eligible nodes."""
    nodes = view.eligible_nodes
    count = len(nodes)
    if count == 0:
        raise NoEligibleNodeError("no healthy, undrained node")
    if count == 1:
        return nodes[0]
    first = int(rng.random() * count)
    second = int(rng.random() * (count - 1))
    if second >= first:
        second += 1
    a, b = nodes[first], nodes[second]
    loads = view.loads
    return a if loads[a] <= loads[b] else b


def least_loaded(view: LoadView, candidates: Sequence[int], tie_break: int = 0) -> int:
    """Least-loaded candidate; ties go to the first in rotation order starting at ``tie_break``.

    Rotating by a key-derived ``tie_break`` keeps one key on one node while loads are equal,
    without favouring low node indices across keys.
    """
    loads = view.loads
    count = len(candidates)
    if count == 0:
        raise NoEligibleNodeError("no candidate node")
    start = tie_break % count
    best = candidates[start]
    best_load = loads[best]
    for step in range(1, count):
        node = candidates[(start + step) % count]
        load = loads[node]
        if load < best_load:
            best, best_load = node, load
    return best
