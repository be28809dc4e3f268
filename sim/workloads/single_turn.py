"""Single-turn requests shaped ``template | business context | unique tail``.

The common generator of ``lowshare`` (a short context, a long unique body) and ``tenants`` (a
long context, a short unique question): they differ only in the three sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.gc_pause import gc_paused
from sim.types import SimRequest
from sim.workloads.arrivals import ArrivalProcess
from sim.workloads.blocks import mix, mix_int, segment_blocks, to_tuples
from sim.workloads.paper_shape import ANSWER, lognormal_tokens
from sim.workloads.popularity import Population


@dataclass(frozen=True)
class SingleTurnShape:
    tag: int  # namespace of this workload's segment ids
    template_tokens: int  # shared by every key
    context_tokens: int  # one per key
    unique: tuple[float, float, int, int]  # lognormal law of the tail: median, sigma, min, max


def single_turn_requests(
    shape: SingleTurnShape,
    active: Population,
    arrivals: ArrivalProcess,
    *,
    qps: float,
    duration_s: float,
    seed: int,
) -> list[SimRequest]:
    """Requests arriving in [0, duration_s) at a mean of ``qps`` per second, by arrival."""
    tag_template, tag_context, tag_unique = (mix_int(shape.tag, i) for i in range(3))
    rng = np.random.default_rng(seed & ((1 << 64) - 1))
    times = arrivals.times(rng, qps, duration_s)
    n = len(times)
    key = rng.choice(len(active), n, p=active.weights)
    unique = lognormal_tokens(rng, shape.unique, n)
    output = lognormal_tokens(rng, ANSWER, n)
    key_hash = np.array(active.hashes, dtype=np.uint64)[key]

    seg_ids = np.empty(3 * n, dtype=np.uint64)
    seg_ids[0::3] = mix_int(tag_template, 0)
    seg_ids[1::3] = mix(tag_context, key_hash)
    seg_ids[2::3] = mix(mix_int(tag_unique, seed), np.arange(n, dtype=np.uint64))
    seg_lens = np.empty(3 * n, dtype=np.int64)
    seg_lens[0::3] = shape.template_tokens
    seg_lens[1::3] = shape.context_tokens
    seg_lens[2::3] = unique
    ids, starts = segment_blocks(seg_ids, seg_lens, np.arange(0, 3 * n + 1, 3))
    blocks = to_tuples(ids, starts)
    prompt = shape.template_tokens + shape.context_tokens + unique
    names, hashes = active.names, active.hashes
    columns = zip(
        times.tolist(), key.tolist(), blocks, prompt.tolist(), output.tolist(), strict=True
    )
    with gc_paused():
        return [SimRequest(t, names[k], hashes[k], b, p, o) for t, k, b, p, o in columns]
