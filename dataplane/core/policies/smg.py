"""The SGLang model gateway's cache-aware rule as of 2026 (``smg``), and its KV-event mode.

Read from smg-project/smg ``model_gateway/src/policies/cache_aware.rs`` (commit 04def283,
``CacheAwarePolicy::select_worker``, ``select_final_from_affinity``,
``candidate_requires_spill``), which carries sglang PR #14650 (2025-12: a cache miss goes to the
least-loaded worker, not the smallest tree) and smg #2161 (2026-08: the load gate applies to the
*selected* worker, not to the fleet's max - min):

1. Approximate tree (``smg``, HTTP mode): ``match_rate = matched / len(blocks)`` from the
   router's own prefix index (:mod:`.prefix_index`, as :mod:`.sglang`). Above
   ``cache_threshold`` the candidates are the nodes holding the whole match; otherwise none.
2. A candidate *requires a spill* when its load exceeds ``balance_rel_threshold`` x the eligible
   nodes' mean load **and** the mean + ``balance_abs_threshold``. Among the candidates that do
   not, the least loaded (the gateway's expected-wait pick; ties by lowest index). If every
   candidate requires a spill, the least loaded of the nodes that do not (all of them if none).
   A miss (no candidate) goes to the least-loaded eligible node.
3. ``observe`` inserts the request's blocks for the chosen node, whatever the branch.

``smg_events`` is the same selection over the engines' *actual* cache contents (SMG's
event-driven mode, standing also for NVIDIA Dynamo's KV router and llm-d's precise prefix-cache
scorer, which consume vLLM/SGLang KV events): the candidates are the nodes with the longest
resident leading run of the request's blocks (any positive overlap; no threshold, as SMG's
``select_worker_event_driven``). The residency comes from a :class:`Residency` the caller
attaches (the simulator attaches its engines' caches, i.e. events delivered at once and never
lost: the mode at its best). Without one, every request is a miss (least loaded).

Not modelled, as for :mod:`.sglang`: the KV-usage imbalance trigger (``is_kv_imbalanced``; our
snapshots carry request counts, not KV usage), the waiting-prefill overlap decay and the softmax
temperature (both off by default in SMG). The load is the view's: the last snapshot plus this
router's dispatches since (SMG's LeastLoad: backend load polls plus "since-poll dispatch credit").
Defaults are SMG's CLI defaults: threshold 0.3, 64, 1.5.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request, least_loaded
from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from dataplane.core.policies.sglang import (
    BALANCE_ABS_THRESHOLD,
    BALANCE_REL_THRESHOLD,
    CACHE_THRESHOLD,
    MAX_BLOCKS_PER_NODE,
)


class _Gate:
    """SMG's per-candidate spill predicate over one decision's loads."""

    __slots__ = ("limit",)

    def __init__(self, mean: float, rel: float, absolute: float) -> None:
        self.limit = max(mean * rel, mean + absolute)  # over both margins ⇔ over their max

    def spills(self, load: float) -> bool:
        return load > self.limit


def select_final(
    candidates: Sequence[int], eligible: Sequence[int], view: LoadView, gate: _Gate
) -> Decision:
    """``select_final_from_affinity``: a safe candidate, else a safe spill target, else any
    (each the least loaded, ties to the first listed: :func:`.base.least_loaded`)."""
    loads = view.loads
    if not candidates:
        return Decision(least_loaded(view, eligible), Reason.CACHE_MISS)
    safe = [n for n in candidates if not gate.spills(loads[n])]
    if safe:
        return Decision(least_loaded(view, safe), Reason.CACHE_MATCH)
    cool = [n for n in eligible if not gate.spills(loads[n])]
    return Decision(least_loaded(view, cool or eligible), Reason.BALANCE)


class SmgPolicy(PrefixHistoryPolicy):
    name = "smg"

    def __init__(
        self,
        *,
        seed: int = 0,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs_threshold: float = BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
        max_blocks_per_node: int = MAX_BLOCKS_PER_NODE,
    ) -> None:
        super().__init__(seed=seed, max_blocks_per_node=max_blocks_per_node)
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold

    def gate(self, view: LoadView, eligible: Sequence[int]) -> _Gate:
        loads = view.loads
        mean = sum(loads[n] for n in eligible) / len(eligible)
        return _Gate(mean, self.balance_rel_threshold, self.balance_abs_threshold)

    def candidates(self, request: Request, view: LoadView) -> list[int]:
        """The nodes holding the request's matched prefix, when the match clears the threshold."""
        blocks = request.prefix
        depth, holders = self.index(view).match(blocks, self.eligible_mask(view))
        if depth / len(blocks) <= self.cache_threshold:
            return []
        return [n for n in view.eligible_nodes if holders >> n & 1]

    def choose(self, request: Request, view: LoadView) -> Decision:
        eligible = view.eligible_nodes
        if not eligible:
            raise NoEligibleNodeError("no healthy, undrained node")
        found = self.candidates(request, view)
        return select_final(found, eligible, view, self.gate(view, eligible))


class SmgEventsPolicy(SmgPolicy):
    """SMG's event-driven mode: candidates by the engines' resident prefix, not a router tree."""

    name = "smg_events"
    needs_residency = True  # the caller attaches ``residency`` (the simulator: its engines)

    def candidates(self, request: Request, view: LoadView) -> list[int]:
        residency = self.residency
        if residency is None:
            return []
        blocks = request.prefix
        best, found = 0, []
        for node in view.eligible_nodes:
            depth = residency.resident_prefix(node, blocks)
            if depth > best:
                best, found = depth, [node]
            elif depth == best and depth > 0:
                found.append(node)
        return found

    def observe(self, request: Request, decision: Decision, view: LoadView) -> None:
        """Nothing to learn: the engines' events are the state."""
