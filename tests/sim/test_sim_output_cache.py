"""Generated-token caching: a finished request's full output blocks join its chain (vLLM V1)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sim.cluster import Cluster, ClusterConfig
from sim.engine_model import LLAMA_70B
from sim.types import BLOCK_TOKENS, SimRequest
from sim.workloads.paper import PaperWorkload


def _two_turns() -> tuple[SimRequest, SimRequest]:
    """Turns 0 and 1 of one conversation of the paper workload, 100 s apart."""
    workload = PaperWorkload(top_k=4, rag_scope="conversation")
    stream = workload.stream(qps=2.0, duration_s=1200.0, seed=1)
    requests = stream.requests()
    for i in np.flatnonzero(stream.turn == 0).tolist():
        later = np.flatnonzero((stream.thread == stream.thread[i]) & (stream.turn == 1))
        if len(later):
            first, second = requests[i], requests[int(later[0])]
            return replace(first, arrival_s=0.0), replace(second, arrival_s=100.0)
    raise AssertionError("no two-turn conversation in the stream")


def _cached(requests: list[SimRequest], cache_outputs: bool) -> list[int]:
    config = ClusterConfig(profile=LLAMA_70B, nodes=1, cache_outputs=cache_outputs)
    cluster = Cluster(requests, "flat", config)
    cluster.run()
    return [job.cached for job in cluster.jobs]


def test_the_second_turn_hits_exactly_the_first_turns_extra_output_blocks() -> None:
    first, second = _two_turns()
    full_prompt = first.prompt_tokens // BLOCK_TOKENS
    extra = len(first.output_blocks)
    assert extra == (first.prompt_tokens + first.output_tokens) // BLOCK_TOKENS - full_prompt > 0
    # The workload's ids agree: turn 2's prompt starts with turn 1's prompt and answer.
    assert second.blocks[: full_prompt + extra] == first.blocks[:full_prompt] + first.output_blocks
    without = _cached([first, second], cache_outputs=False)
    with_outputs = _cached([first, second], cache_outputs=True)
    assert without == [0, full_prompt * BLOCK_TOKENS]
    assert with_outputs == [0, (full_prompt + extra) * BLOCK_TOKENS]


def test_output_blocks_respect_the_cache_capacity() -> None:
    first, second = _two_turns()
    blocks = -(-(first.prompt_tokens + first.output_tokens) // BLOCK_TOKENS)
    profile = LLAMA_70B.with_overrides(kv_blocks=blocks)
    config = ClusterConfig(profile=profile, nodes=1)
    cluster = Cluster([first, second], "flat", config)
    cluster.run()
    cache = cluster.nodes[0].cache
    assert cache.used <= cache.capacity
    assert cache.reserved == 0
