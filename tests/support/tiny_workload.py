"""A tiny workload for the simulator's tests (the real generators live in sim.workloads).

Keys with Zipf-like popularity; a prompt is a per-key shared prefix followed by request-unique
blocks, so the prefix cache has something to hit and the ideal hit rate is easy to compute.
"""

from __future__ import annotations

import random

from dataplane.core.keys import hash_key
from sim.types import BLOCK_TOKENS, SimRequest


class TinyWorkload:
    """Poisson arrivals; per-key shared prefix of ``shared_blocks`` blocks."""

    name = "tiny"

    def __init__(
        self,
        *,
        keys: int = 40,
        prompt_tokens: int = 1000,
        shared_blocks: int = 40,
        output_tokens: int = 50,
        skew: float = 1.0,
    ) -> None:
        self.keys = keys
        self.prompt_tokens = prompt_tokens
        self.shared_blocks = shared_blocks
        self.output_tokens = output_tokens
        self.weights = [1.0 / (k + 1) ** skew for k in range(keys)]

    def requests(self, *, qps: float, duration_s: float, seed: int) -> list[SimRequest]:
        rng = random.Random(seed)
        blocks_per_prompt = -(-self.prompt_tokens // BLOCK_TOKENS)
        out: list[SimRequest] = []
        t = rng.expovariate(qps)
        unique = 1 << 40
        while t < duration_s:
            key = rng.choices(range(self.keys), self.weights)[0]
            shared = [(key + 1) << 20 | j for j in range(self.shared_blocks)]
            count = blocks_per_prompt - len(shared)
            blocks = tuple(shared + list(range(unique, unique + count)))
            unique += count
            name = f"key-{key}"
            out.append(
                SimRequest(t, name, hash_key(name), blocks, self.prompt_tokens, self.output_tokens)
            )
            t += rng.expovariate(qps)
        return out
