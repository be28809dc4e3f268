"""Delivered affinity of a load run as the client saw it (issue 31): the simulator's four numbers
(:mod:`sim.affinity`) over the outcomes of a replayed workload, for ``cachectl demo``.

A follow-up is a request of a conversation thread after the thread's first request in the run;
its node is the engine that answered (``x-cacheroute-node``), its tokens the engine's own usage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from cachectl.loadgen.results import Outcome
from sim.affinity import Affinity, Turn, affinity_line, measure_turns

__all__ = ["Affinity", "affinity_of", "affinity_text"]
from sim.types import SimRequest


def affinity_of(
    outcomes: Sequence[Outcome],
    requests: Sequence[SimRequest],
    nodes: Sequence[str],
    *,
    block_tokens: int = 16,
) -> Affinity:
    turns = []
    for o in sorted(outcomes, key=lambda o: o.index):
        request = requests[o.index]
        served = o.error is None and o.first_token >= 0
        turns.append(
            Turn(
                request.thread,
                o.node_id,
                o.measured,
                served,
                o.prompt_tokens,
                o.cached_tokens,
                request.blocks,
                request.output_blocks,
            )
        )
    per_node = Counter(o.node_id for o in outcomes if o.measured and o.node_id)
    return measure_turns(
        turns, [float(per_node.get(n, 0)) for n in nodes], block_tokens=block_tokens
    )


def affinity_text(affinity: Affinity) -> str:
    """The demo's line for one phase, or why there is no follow-up to measure."""
    if affinity.followups == 0:
        return f"  load CoV {affinity.load_cov:.3f}; no follow-ups (no multi-turn threads here)"
    return "  " + affinity_line(affinity)
