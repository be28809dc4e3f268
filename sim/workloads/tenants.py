"""``tenants``: the local demo's workload, many businesses with long per-business system prompts.

A regime with more prefix sharing than the paper's assistant (whose prompts share ≈ 42% of their
tokens, ideal, and are decode-heavy): each of the top-``top_k`` businesses (the paper's
popularity, :mod:`sim.workloads.popularity`) has a long fixed context, its instructions, policies
and product catalogue, in front of a short, unique user question::

    template (96 tokens) | business context (context_tokens, default 6,144) | question

* question: the paper's current-turn law (lognormal, median 90 tokens, in [4, 1024]);
* answer (``output_tokens``): the paper's answer law (lognormal, median 129, in [8, 1024]);
* single-turn requests; Poisson arrivals by default (any :mod:`sim.workloads.arrivals` process).

Why this one for the demo: per-business reuse is ≈ 98% of prompt tokens, and the working set,
128 × 6.2K ≈ 800K tokens, is larger than one 70B destination's KV cache (641K tokens) but small
next to eight of them. Under Flat-LB every destination must hold every business's context, so
caches thrash and each business's context is recomputed on each destination; a plan that keeps
each business on one or two destinations fits the working set and turns the saved prefill into
lower queueing. The simulator shows the gap (8 × 70B, 16-20 QPS, 40 s from cold: hit ≈ 36-43%
vs ≈ 73-76%, p99 TTFT ≈ 2.5-6 s vs ≈ 1.1-1.7 s), and the demo reproduces it live.
docs/results.md shows the paper's regimes, where the margins are smaller or reversed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sim.types import SimRequest
from sim.workloads.arrivals import AZURE_CONV, BOOTSTRAP_BLOCK, GAMMA_CV, ArrivalProcess
from sim.workloads.paper_shape import CURRENT
from sim.workloads.popularity import paper_active_set
from sim.workloads.single_turn import SingleTurnShape, single_turn_requests

TEMPLATE_TOKENS = 96
CONTEXT_TOKENS = 6144

_TAG = 0x7E_4A17  # namespace of this workload's segment ids


@dataclass
class TenantsWorkload:
    """Long per-business contexts, short unique questions (module docstring)."""

    top_k: int | None = 128
    context_tokens: int = CONTEXT_TOKENS
    arrival: str = "poisson"
    cv: float = GAMMA_CV
    gaps_path: str | Path = AZURE_CONV
    bootstrap_block: int = BOOTSTRAP_BLOCK
    name: str = field(default="tenants", init=False)

    def __post_init__(self) -> None:
        if self.context_tokens < 0:
            raise ValueError(f"context_tokens must be >= 0, got {self.context_tokens}")
        self.arrivals()
        paper_active_set(self.top_k)

    def arrivals(self) -> ArrivalProcess:
        return ArrivalProcess(self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block)

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        return single_turn_requests(
            SingleTurnShape(_TAG, TEMPLATE_TOKENS, self.context_tokens, CURRENT),
            paper_active_set(self.top_k),
            self.arrivals(),
            qps=qps,
            duration_s=duration_s,
            seed=seed,
        )
