"""The tiny workload of the simulator's tests (tests/support/tiny_workload.py).

Keys with Zipf-like popularity; a prompt is a per-key shared prefix followed by request-unique
blocks, so the prefix cache has something to hit and the ideal hit rate is easy to compute.
"""

from __future__ import annotations

from sim.types import BLOCK_TOKENS
from tests.support.tiny_workload import TinyWorkload


def test_tiny_workload_blocks_match_prompt_length() -> None:
    requests = TinyWorkload(prompt_tokens=1000).requests(qps=5, duration_s=10, seed=1)
    assert requests
    assert all(len(r.blocks) == -(-r.prompt_tokens // BLOCK_TOKENS) for r in requests)
    assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)
