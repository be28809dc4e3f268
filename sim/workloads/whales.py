"""The 8B mechanism workload: the paper workload plus injected "whale" keys.

The paper exercises replication on Llama-3.1-8B (30 single-H100 destinations) by injecting
synthetic very hot keys into its workload, with active sets of 16 to 2,000 keys; it gives neither
their number nor their shares. Here four whales carry 12%, 8%, 6% and 4% of all requests (30%
together); the other 70% is the paper workload over the top-``top_k`` keys, with the same prompt
structure, threads and arrivals (:mod:`sim.workloads.paper`).

Why these shares: a key needs ``k_b = ceil(λ_b / q_cap) > 1`` replicas once its rate passes one
destination's load target. Assume ``q_cap ≈ 20 QPS`` for one 8B H100 on this workload (an
estimate from CALIBRATION.md §1, to be replaced by the simulator's measured knee): a request costs
≈ 20 ms of prefill (≈ 660 uncached tokens of a 1.2K prompt at a ≈ 45% hit, ≈ 0.03 ms/token) and
≈ 20-28 ms of decode time (≈ 165 answer tokens in a batch of 64-128 at ≈ 6.5 ms + 0.05 µs per
context token per step), so one GPU saturates at ≈ 21-26 QPS and the latency knee sits near 20.
The fleet then serves ≈ 600 QPS. At 300 QPS (half load) the whales offer 36, 24, 18 and 12 QPS, so
the top two need two replicas; at 600 QPS all four need 2-4. The hottest ordinary key (3.1% of
the other 70% at top-128, so 2.1% of all) offers 6.4 QPS at 300 and 12.8 at 600: at top-128 only
whales are replicated. (At top-16 the hottest ordinary key has 10.6% of the 70% and replicates too.)
Check: the simulator's single-destination knee (``sim/calibration.py``, p99 TTFT ≤ 3.5 s, seed 1)
measured 23.75 QPS on this workload; whale-0 then needs two replicas from 200 QPS, whale-1 from
300 QPS (where it sits at the boundary), all four by 600 QPS.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dataplane.core.keys import hash_key
from sim.types import SimRequest
from sim.workloads.arrivals import AZURE_CONV, BOOTSTRAP_BLOCK, GAMMA_CV, ArrivalProcess
from sim.workloads.paper import PaperStream, generate
from sim.workloads.popularity import Population, paper_active_set

WHALE_SHARES = (0.12, 0.08, 0.06, 0.04)
Q_CAP_8B = 20.0  # assumed per-destination load target (QPS) of one 8B H100, see docstring
REFERENCE_QPS = 300.0  # half of the 30-destination fleet's ≈ 600 QPS


class WhaleError(ValueError):
    """Whale shares that leave no traffic for the ordinary keys, or are not positive."""


@functools.cache
def whale_active_set(top_k: int | None, shares: tuple[float, ...]) -> Population:
    """``whale-0..`` with ``shares``, then the paper's top-``top_k`` keys sharing the rest."""
    if any(s <= 0 for s in shares) or sum(shares) >= 1:
        raise WhaleError(f"whale shares must be > 0 and sum to < 1; got {shares}")
    base = paper_active_set(top_k)
    names = tuple(f"whale-{i}" for i in range(len(shares)))
    weights = np.concatenate((np.array(shares), base.weights * (1 - sum(shares))))
    weights.setflags(write=False)
    return Population(
        names=names + base.names,
        hashes=tuple(hash_key(k) for k in names) + base.hashes,
        weights=weights,
    )


@dataclass
class WhalesWorkload:
    """The paper workload over ``top_k`` keys (16-2,000 in the paper) plus the whales."""

    top_k: int | None = 128
    shares: tuple[float, ...] = WHALE_SHARES
    arrival: str = "poisson"
    cv: float = GAMMA_CV
    gaps_path: str | Path = AZURE_CONV
    bootstrap_block: int = BOOTSTRAP_BLOCK
    name: str = field(default="whales", init=False)

    def __post_init__(self) -> None:
        self.shares = tuple(float(s) for s in self.shares)
        self.arrivals()
        whale_active_set(self.top_k, self.shares)

    def arrivals(self) -> ArrivalProcess:
        """The aggregate arrival process these options select."""
        return ArrivalProcess(self.arrival, self.cv, Path(self.gaps_path), self.bootstrap_block)

    def stream(self, *, qps: float, duration_s: float, seed: int) -> PaperStream:
        """The stream with its structure (for statistics and tests)."""
        active = whale_active_set(self.top_k, self.shares)
        return generate(active, self.arrivals(), qps, duration_s, seed)

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
        return self.stream(qps=qps, duration_s=duration_s, seed=seed).requests()
