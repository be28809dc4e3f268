"""The routing table inside the simulator, built the way the control plane builds it.

The control plane never knows a generator's true per-key rates: it counts requests per key over a
past window and runs the planner on those estimates. The simulator does the same. A run's request
stream is generated with a leading *plan window* that is not simulated: its per-key request counts
divided by its length are the rate estimates (the paper leaves the estimator open; a windowed
mean is the simplest unbiased one), and :func:`controlplane.core.planner.build_plan` turns them into
the table with the policy's ``placement``, ``q_cap`` and ``W`` slots per destination. The run then
starts, with cold caches, at the end of that window, so the plan is always built from traffic the
run does not replay (a disjoint, earlier segment of the same stream).

Because the window is generated at the run's own offered QPS, the estimated rates scale with the
rung of a load ladder, and so do the replica counts ``k_b = ceil(λ_b / q_cap)``; a plan estimated
at one QPS and reused at another would under- or over-replicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controlplane.core.planner import PlanInput, build_plan
from dataplane.core.policies.registry import POLICIES
from dataplane.core.table import RoutingTable
from sim.types import SimRequest, Workload

DEFAULT_PLAN_WINDOW_S = 60.0
DEFAULT_SLOTS_PER_NODE = 8  # W: the paper's warm slots per destination


@dataclass(frozen=True)
class Stream:
    """A run's requests (times from 0) and the earlier window its plan is estimated from."""

    requests: list[SimRequest]
    prior: list[SimRequest]
    prior_window_s: float
    prewarm: list[SimRequest] = field(default_factory=list)  # times in [-prewarm_s, 0)


def split_stream(
    requests: Sequence[SimRequest],
    prior_window_s: float,
    duration_s: float,
    prewarm_s: float = 0.0,
) -> Stream:
    """Cut a stream: the run starts at ``lead = max(prior_window_s, prewarm_s)``.

    The ``prior_window_s`` before the run estimate the rates, the ``prewarm_s`` before it are
    replayed into the caches (shifted to negative times), ``duration_s`` after it are simulated.
    """
    lead = max(prior_window_s, prewarm_s)
    prior = [r for r in requests if lead - prior_window_s <= r.arrival_s < lead]
    run = [_shift(r, lead) for r in requests if lead <= r.arrival_s < lead + duration_s]
    warm = (
        [_shift(r, lead) for r in requests if lead - prewarm_s <= r.arrival_s < lead]
        if prewarm_s > 0
        else []
    )
    return Stream(run, prior, prior_window_s, warm)


def make_stream(
    workload: Workload,
    *,
    qps: float,
    duration_s: float,
    seed: int,
    prior_window_s: float,
    prewarm_s: float = 0.0,
) -> Stream:
    """Generate ``max(prior_window_s, prewarm_s) + duration_s`` of ``workload`` and split it."""
    lead = max(prior_window_s, prewarm_s)
    requests = workload.requests(qps=qps, duration_s=lead + duration_s, seed=seed)
    return split_stream(requests, prior_window_s, duration_s, prewarm_s)


def estimate_rates(
    prior: Sequence[SimRequest], window_s: float
) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Per-key request rates (requests/s) over the window: key hashes, rates, key labels."""
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    counts = Counter(r.key_hash for r in prior)
    labels = {r.key_hash: r.key for r in prior}
    hashes = np.fromiter(counts.keys(), dtype=np.uint64, count=len(counts))
    rates = np.fromiter(counts.values(), dtype=np.float64, count=len(counts)) / window_s
    return hashes, rates, labels


def placement_of(policy: str) -> str | None:
    """The table a registered policy needs ("lpt", "hash", "random"), or None."""
    cls = POLICIES.get(policy)
    return None if cls is None else cls.placement


def plan_for(
    placement: str | None,
    stream: Stream,
    node_ids: Sequence[str],
    *,
    q_cap: float,
    slots_per_node: int = DEFAULT_SLOTS_PER_NODE,
    seed: int = 0,
) -> RoutingTable | None:
    """The table for ``placement`` from the stream's prior window (None when none is needed)."""
    if placement is None:
        return None
    hashes, rates, labels = estimate_rates(stream.prior, stream.prior_window_s)
    return build_plan(
        PlanInput(
            key_hashes=hashes,
            rates=rates,
            node_ids=list(node_ids),
            q_cap=q_cap,
            slots_per_node=slots_per_node,
            placement=placement,
            seed=seed,
            pool="sim",
            key_labels=labels,
        ),
        created_at_unix_ms=1,
    )


def _shift(request: SimRequest, offset: float) -> SimRequest:
    return SimRequest(
        request.arrival_s - offset,
        request.key,
        request.key_hash,
        request.blocks,
        request.prompt_tokens,
        request.output_tokens,
        request.thread,
        request.output_blocks,
        request.turn,
    )
