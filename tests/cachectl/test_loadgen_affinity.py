"""The demo's delivered-affinity numbers from a load run's outcomes (cachectl/loadgen/affinity.py):
outcomes map to their requests by index, whatever order they finished in."""

from __future__ import annotations

import pytest

from cachectl.loadgen.affinity import affinity_of
from cachectl.loadgen.results import Outcome
from sim.types import SimRequest


def request(thread: int, blocks: tuple[int, ...]) -> SimRequest:
    return SimRequest(0.0, "k", 1, blocks, 16 * len(blocks), 8, thread=thread)


def outcome(index: int, node: str, cached: int, prompt: int, measured: bool = True) -> Outcome:
    return Outcome(
        index=index, key="k", measured=measured, scheduled=0.0, node_id=node, first_token=1.0,
        finished=2.0, prompt_tokens=prompt, cached_tokens=cached,
    )  # fmt: skip


def test_follow_ups_by_thread_with_the_engines_tokens() -> None:
    requests = [request(1, (5, 6)), request(1, (5, 6, 7)), request(1, (5, 6, 7, 8))]
    outcomes = [  # finished out of order
        outcome(2, "e1", 0, 64),
        outcome(0, "e0", 0, 32, measured=False),
        outcome(1, "e0", 32, 48),
    ]
    got = affinity_of(outcomes, requests, ["e0", "e1", "e2"])
    assert got.followups == 2 and got.followups_on_first_node == pytest.approx(0.5)
    assert got.followup_cached_fraction == pytest.approx(32 / 112)
    assert (got.reusable_tokens, got.delivered_tokens) == (32 + 48, 32)
    assert got.load_cov == pytest.approx(load_cov_of([1, 1, 0]))


def load_cov_of(counts: list[int]) -> float:
    mean = sum(counts) / len(counts)
    return float((sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5 / mean)
