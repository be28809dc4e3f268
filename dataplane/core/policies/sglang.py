"""SGLang-router-style cache-aware routing (sgl-router / sgl-model-gateway ``cache_aware``).

Rule, as SGLang's ``CacheAwarePolicy::select_worker`` (sgl-project/sglang,
``sgl-router/src/policies/cache_aware.rs``), over the eligible nodes:

1. Imbalanced if ``max_load - min_load > balance_abs_threshold`` AND
   ``max_load > balance_rel_threshold * min_load`` → the least-loaded node (ties: lowest index,
   as Rust's ``min_by_key``), reason ``balance``.
2. Else ``match_rate = matched_blocks / len(blocks)`` from the shared
   :class:`.prefix_index.PrefixIndex` (blocks = the request's prefix blocks, or ``(key_hash,)``):
   if ``match_rate > cache_threshold`` → the node with the longest match (ties: least loaded,
   then lowest index; SGLang takes the first tenant of the matched tree node), reason
   ``cache_match``; else → the node with the smallest tree = fewest recorded blocks (ties: least
   loaded, then lowest index), reason ``cache_miss``.
3. ``observe`` inserts the request's blocks for the chosen node, whatever the branch (SGLang also
   updates the tree in the imbalanced branch).

Defaults, pinned from the user-facing defaults of ``python -m sglang_router.launch_router``
(sgl-project/sglang ``sgl-router/py_src/sglang_router/router_args.py``, ``RouterArgs``; the Rust
binary's clap defaults in ``sgl-router/src/main.rs`` agree): ``cache_threshold`` 0.3,
``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, ``eviction_interval_secs`` 120,
``max_tree_size`` 2**26.
(The library-internal ``CacheAwareConfig::default`` in ``sgl-router/src/policies/mod.rs`` differs:
0.5 / 32 / 1.1 / 30 s / 10,000; users launching the router get the CLI values.)

Where this differs from SGLang, and why:

* SGLang's tree holds request *characters*; ``max_tree_size`` bounds each worker's character count
  (``Tree::evict_tenant_by_size`` in ``sgl-router/src/tree.rs``). Our unit is a 16-token block
  (≈ 64 characters at ≈ 4 characters per token), so 2**26 characters → ``max_blocks_per_node``
  = 2**20 blocks, and match_rate counts blocks, not characters.
* SGLang evicts in a background thread every 120 s, so a tree may overshoot its cap between
  cycles; we evict on insert, so a node never holds more than the cap (no thread to stop).
* SGLang's loads are its own in-flight request counts, over all workers; ours are
  ``view.loads`` (the last snapshot's running + waiting plus this router's in-flight correction),
  over the eligible nodes only.
* ``tie_order="random"`` (an option; default ``"index"``, the rule above) breaks cache-miss ties
  among equally small, equally loaded trees in a per-instance random order (a permutation drawn
  from the seed per NodeSet size) instead of by lowest index: real gateway replicas iterate
  their workers in their own order, so many routers need not all pick the same lowest index.
* A membership change resets the index (:mod:`.prefix_index`); SGLang removes a departed
  worker's tenant and keeps the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.core.load_view import LoadView, NoEligibleNodeError
from dataplane.core.policies.base import Decision, Reason, Request
from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from dataplane.core.policies.prefix_index import lightest

CACHE_THRESHOLD = 0.3
BALANCE_ABS_THRESHOLD = 64.0
BALANCE_REL_THRESHOLD = 1.5
MAX_TREE_CHARS = 2**26
CHARS_PER_BLOCK = 64  # 16 tokens x ~4 characters per token
MAX_BLOCKS_PER_NODE = MAX_TREE_CHARS // CHARS_PER_BLOCK  # 2**20
TIE_ORDERS = ("index", "random")


class SGLangPolicy(PrefixHistoryPolicy):
    name = "sglang"

    def __init__(
        self,
        *,
        seed: int = 0,
        cache_threshold: float = CACHE_THRESHOLD,
        balance_abs_threshold: float = BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = BALANCE_REL_THRESHOLD,
        max_blocks_per_node: int = MAX_BLOCKS_PER_NODE,
        tie_order: str = "index",
    ) -> None:
        super().__init__(seed=seed, max_blocks_per_node=max_blocks_per_node)
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {cache_threshold}")
        if tie_order not in TIE_ORDERS:
            raise ValueError(f"tie_order must be one of {', '.join(TIE_ORDERS)}, got {tie_order!r}")
        self.tie_order = tie_order
        self._rank: list[int] = []
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold

    def choose(self, request: Request, view: LoadView) -> Decision:
        eligible = view.eligible_nodes
        if not eligible:
            raise NoEligibleNodeError("no healthy, undrained node")
        loads = view.loads
        min_load = min(map(loads.__getitem__, eligible))
        max_load = max(map(loads.__getitem__, eligible))
        if (
            max_load - min_load > self.balance_abs_threshold
            and max_load > self.balance_rel_threshold * min_load
        ):
            return Decision(next(n for n in eligible if loads[n] == min_load), Reason.BALANCE)
        index = self.index(view)
        blocks = request.prefix
        depth, holders = index.match(blocks, self.eligible_mask(view))
        if depth / len(blocks) > self.cache_threshold:
            return Decision(lightest(holders, loads), Reason.CACHE_MATCH)
        count = index.block_count
        rank = self._ranks(len(view.nodes))
        smallest = min(eligible, key=lambda n: (count(n), loads[n], rank[n]))
        return Decision(smallest, Reason.CACHE_MISS)

    def _ranks(self, size: int) -> Sequence[int]:
        """Tie order of nodes: their index, or a seeded random permutation (``tie_order``)."""
        if self.tie_order == "index":
            return range(size)
        if len(self._rank) != size:
            order = list(range(size))
            self.rng.shuffle(order)
            self._rank = [0] * size
            for position, node in enumerate(order):
                self._rank[node] = position
        return self._rank
