"""The plan, the online step, and conversation affinity that needs no client help (issue 30).

:mod:`.cacheroute_online` keeps a conversation on the node holding its history only when the
client echoes the session token; SDK callers and coding agents do not, and without the echo each
turn of a multi-member warm key goes to whichever member is least loaded, so a conversation's
history is split over several caches and a spilled turn's successor goes back to a member that
lacks it. This policy makes the choice a function of the conversation itself. Under the online
step's bound (``ceil((1 + ε)(total + 1)/n)``), for a warm key:

1. **Session token** (when a client does echo one): its node, as the online step.
2. **This router's memory** (``remember`` conversations, :mod:`.conversation_memory`): the node
   of the conversation's last turn *that this router routed*, if eligible and within the bound.
   It follows a spill the way an echoed token would.
3. **Rendezvous.** Else the member with the highest weight ``(conversation ^ hash_key(node id))
   × 0x9E3779B97F4A7C15 mod 2⁶⁴`` among the eligible members within the bound: every router
   computes the same member for a conversation from the request alone, so turns that reach
   another router (or a restarted one) land on the same cache, with no token and no shared
   state.
4. **Spill.** Else the online step's spill: one of the first ``spread`` ring nodes within the
   bound, picked by the conversation's hash, so a spilled conversation keeps one spill target.

The identity is ``Request.flow``: the conversation the doors derive from the request
(:mod:`dataplane.openai_api.conversation`: a session header, else the chat's messages up to the
first user turn) or a ``Route`` caller's ``session_id``; in the simulator, the conversation id. A
request without one goes to the least-loaded member within the bound, as the online step. Cold
keys take the online step's tail (CHWBL on the key). Rendezvous weights hash node *ids*, not
indices, so a membership change moves only the conversations of the nodes that changed.

Two routers given the same table, loads and request decide the same as long as neither has the
conversation in its memory (rules 1, 3, 4 are pure functions of those inputs); the memory only
refines rule 3 for conversations a router has itself routed.

Parameters: ε, the spread and the tail are the online step's, frozen on tuning seeds 2-3
(docs/results.md §5); ``remember`` (on, 65,536) was chosen on the same tuning seeds
(``docs/results/tuning_conversation_seeds2-3.json``); seeds 4-6 stayed held out.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from dataplane.core.keys import hash_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.cacheroute_online import (
    EPSILON,
    SPREAD,
    TAIL,
    CacheRouteOnlinePolicy,
)
from dataplane.core.policies.chwbl import load_bound
from dataplane.core.policies.conversation_memory import ConversationMemory
from dataplane.core.policies.ring import VNODES

_new = tuple.__new__
_ceil = math.ceil
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
REMEMBER = 65_536  # conversations this router remembers (0: none; module docstring)
_REMEMBERED = (Reason.SESSION, Reason.WARM, Reason.SPILL)


def flow_hash(flow: int | str) -> int:
    """The conversation identity as a 64-bit int (0: none): ints as they are, strings by their
    CRC-32 (plus one, so "" alone is 0) times the golden-ratio constant mod 2**64 (one C call and
    one multiply; the same in every router and language)."""
    if isinstance(flow, str):
        return ((zlib.crc32(flow.encode("utf-8")) + 1) * _GOLDEN) & _MASK64 if flow else 0
    return flow


def rendezvous_first(
    flow: int, members: Sequence[int], salts: Sequence[int], loads: Sequence[float], limit: float
) -> int:
    """The member with the highest weight ``((flow ^ salt) * GOLDEN) mod 2**64`` among those whose
    load is at most ``limit``; -1 if none. One multiply per member (a full SplitMix64 per member
    cost ~1 µs a decision); the flow and the salts are already well-mixed 64-bit hashes, and the
    multiply carries every input bit into the high bits that decide the order."""
    best, best_weight = -1, -1
    for member in members:
        if loads[member] <= limit:
            weight = ((flow ^ salts[member]) * _GOLDEN) & _MASK64
            if weight > best_weight:
                best, best_weight = member, weight
    return best


class CacheRouteConversationPolicy(CacheRouteOnlinePolicy):
    name = "cacheroute_conversation"

    def __init__(
        self,
        *,
        seed: int = 0,
        epsilon: float = EPSILON,
        spread: int = SPREAD,
        tail: str = TAIL,
        vnodes: int = VNODES,
        remember: int = REMEMBER,
        first_epsilon: float | None = None,
    ) -> None:
        super().__init__(seed=seed, epsilon=epsilon, spread=spread, tail=tail, vnodes=vnodes)
        if remember < 0:
            raise ValueError(f"remember must be >= 0, got {remember}")
        if first_epsilon is not None and not (0 <= first_epsilon <= epsilon):
            raise ValueError(f"first_epsilon must be in [0, {epsilon}], got {first_epsilon}")
        self.memory = ConversationMemory(remember) if remember else None
        # The bound of rule 3 for a request that opens its conversation; None: the bound.
        self.first_epsilon = first_epsilon
        self._salted: NodeSet | None = None  # the NodeSet the rendezvous salts belong to
        self._salts: tuple[int, ...] = ()
        self._flow: tuple[int | str, int] = (0, 0)  # (Request.flow, its hash) of the last choose

    def _node_salts(self, nodes: NodeSet) -> tuple[int, ...]:
        if nodes is not self._salted:
            self._salts = tuple(hash_key(node) for node in nodes.ids)
            self._salted = nodes
        return self._salts

    def _warm(
        self, request: Request, view: LoadView, eligible: Sequence[int], bound: int
    ) -> Decision:
        """The online step's preamble chose ``eligible``; the conversation picks among them."""
        loads = view.loads
        limit = bound - 1.0
        flow = flow_hash(request.flow)
        self._flow = (request.flow, flow)  # observe reads it back instead of hashing again
        if flow == 0:  # no identity: the online step's warm rule
            return super()._warm(request, view, eligible, bound)
        memory = self.memory
        if memory is not None:
            if memory.nodes_id != id(view.nodes):
                memory.clear(id(view.nodes))
            last = memory.get(flow ^ request.key_hash)
            if last >= 0 and loads[last] <= limit and view.is_eligible(last):
                return _new(Decision, (last, Reason.SESSION))
        if self.first_epsilon is not None and request.opening:  # the online step's bound, tighter
            limit = min(limit, load_bound(view, self.first_epsilon) - 1.0)
        best = rendezvous_first(flow, eligible, self._node_salts(view.nodes), loads, limit)
        if best >= 0:
            return _new(Decision, (best, Reason.WARM))
        return Decision(self._spill(request, view, bound), Reason.SPILL)

    def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
        """Remember where the conversation went (warm keys; the tail keeps the key's ring home)."""
        memory = self.memory
        if memory is not None and decision[1] in _REMEMBERED:
            seen, flow = self._flow
            if seen is not request.flow:
                flow = flow_hash(request.flow)
            if flow:
                memory.put(flow ^ request.key_hash, decision[0])
