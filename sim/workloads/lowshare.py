"""A low-prefix-sharing regime, like the paper's Qwen3-32B runs (flat hit ≈ 1%, affinity ≈ 10%).

The paper reports that on Qwen3-32B prefix sharing was low: Flat-LB reached a hit rate of ≈ 1% and
affinity only ≈ 10%, and there affinity could lose to Flat-LB (hence the shadow-replay gate). It
does not describe those prompts, so this workload is built to sit at exactly those two levels,
with long, mostly unique prompts (single-turn, document-style requests):

    template (48 tokens, 3 blocks) | business context (432 tokens, 27 blocks) | unique body

* the body is unique to each request, lognormal with median 3,600 tokens and σ 0.6 (mean ≈ 4,300),
  clipped to [256, 16,384], so the mean prompt is ≈ 4,800 tokens;
* cross-key reuse (what a cache-blind balancer keeps on a large fleet) is the template only:
  48 / 4,800 = 1.0% of tokens;
* per-key reuse (perfect affinity, infinite cache) adds the business context: 480 / 4,800 = 10%.

Both are block-aligned, so the ideal hit rates equal these shares up to the cold first request of
each key. Keys follow the paper's popularity over the top-``top_k`` keys; answers follow the paper
workload's answer law (median 129 tokens). Arrivals are any :mod:`sim.workloads.arrivals` process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sim.types import SimRequest
from sim.workloads.arrivals import AZURE_CONV, BOOTSTRAP_BLOCK, GAMMA_CV, ArrivalProcess
from sim.workloads.popularity import paper_active_set
from sim.workloads.single_turn import SingleTurnShape, single_turn_requests

TEMPLATE_TOKENS = 48
CONTEXT_TOKENS = 432
BODY = (3600.0, 0.6, 256, 16384)  # lognormal median, sigma, min, max (tokens)

SHAPE = SingleTurnShape(0x10_5AE, TEMPLATE_TOKENS, CONTEXT_TOKENS, BODY)


@dataclass
class LowShareWorkload:
    """Long single-turn prompts sharing 1% across keys and 10% within a key."""

    top_k: int | None = 128
    arrival: str = "poisson"
    cv: float = GAMMA_CV
    gaps_path: str | Path = AZURE_CONV
    bootstrap_block: int = BOOTSTRAP_BLOCK
    name: str = field(default="lowshare", init=False)

    def __post_init__(self) -> None:
        self.arrivals()
        paper_active_set(self.top_k)

    def arrivals(self) -> ArrivalProcess:
        """The aggregate arrival process these options select."""
        return ArrivalProcess(self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block)

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        return single_turn_requests(
            SHAPE,
            paper_active_set(self.top_k),
            self.arrivals(),
            qps=qps,
            duration_s=duration_s,
            seed=seed,
        )
