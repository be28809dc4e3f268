"""What a plan is built from, and its validation: :class:`PlanInput`, :class:`PlanError`.

Apart from Algorithm 1 (:mod:`controlplane.core.planner`) because the replanner validates the
same input before its own placement, and an input error names the input, never the algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from controlplane.core.byte_admission import BYTE_RANKS, check_sizes
from dataplane.core.table import MAX_NODES, PLACEMENTS, F64Array, U64Array


class PlanError(ValueError):
    """Planner input that cannot produce a plan; the message names the offending input."""


@dataclass(frozen=True)
class PlanInput:
    """Everything a plan is built from. ``rates`` are requests/s aligned with ``key_hashes``.

    Each key hash appears once; a repeat among the admitted keys raises :class:`PlanError`.
    """

    key_hashes: U64Array
    rates: F64Array
    node_ids: Sequence[str]
    q_cap: float
    slots_per_node: int
    node_weights: Sequence[float] = ()
    placement: str = "lpt"
    seed: int = 0
    pool: str = "default"
    key_labels: Mapping[int, str] = field(default_factory=dict)
    # Byte-aware admission (controlplane/core/byte_admission.py): per-key reusable-prefix sizes,
    # aligned with key_hashes, and each destination's cache budget in the same unit. None keeps
    # Algorithm 1's equal slots (slots_per_node).
    prefix_sizes: F64Array | None = None
    cache_budget: float = 0.0
    # or "rate": admission order by rate, bytes only as budget; "best": the admission (of those
    # two and equal slots) that saves the most prefill (controlplane/core/byte_admission.py)
    byte_rank: str = "rate_per_byte"


def check_input(plan: PlanInput) -> list[float]:
    """Validate the input; return the destination weights (all 1 when none are given)."""
    num_nodes = len(plan.node_ids)
    if num_nodes == 0:
        raise PlanError("no destinations: need at least one node")
    if num_nodes > MAX_NODES:
        raise PlanError(f"{num_nodes} destinations; the limit is {MAX_NODES}")
    if len(set(plan.node_ids)) != num_nodes:
        raise PlanError("destination ids are not unique")
    if plan.key_hashes.shape != plan.rates.shape:
        raise PlanError(f"{plan.key_hashes.shape[0]} keys but {plan.rates.shape[0]} rates")
    if not (math.isfinite(plan.q_cap) and plan.q_cap > 0):
        raise PlanError(f"q_cap must be a positive number, got {plan.q_cap}")
    if plan.slots_per_node < 0:
        raise PlanError(f"slots_per_node must be >= 0, got {plan.slots_per_node}")
    if plan.placement not in PLACEMENTS:
        raise PlanError(f"placement must be one of {PLACEMENTS}, got {plan.placement!r}")
    if not 0 <= plan.seed < 2**64:
        raise PlanError(f"seed must be an integer in [0, 2**64), got {plan.seed}")
    if plan.rates.size and not (np.all(np.isfinite(plan.rates)) and plan.rates.min() >= 0):
        raise PlanError("rates must be finite and >= 0")
    if plan.prefix_sizes is not None:
        if plan.placement != "lpt":
            raise PlanError(f"byte-aware admission needs placement lpt, got {plan.placement!r}")
        problem = check_sizes(
            np.asarray(plan.prefix_sizes, dtype=np.float64), plan.rates.shape[0], plan.cache_budget
        )
        if problem:
            raise PlanError(problem)
        if plan.byte_rank not in BYTE_RANKS:
            raise PlanError(f"byte_rank must be one of {BYTE_RANKS}, got {plan.byte_rank!r}")
    weights = [float(w) for w in plan.node_weights] or [1.0] * num_nodes
    if len(weights) != num_nodes:
        raise PlanError(f"{len(weights)} weights for {num_nodes} destinations")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise PlanError("destination weights must be positive numbers")
    return weights
