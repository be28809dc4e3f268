"""Delivered affinity of a run (sim/affinity.py): follow-ups, their node, reusable vs delivered
cached tokens and load CoV, on hand-made jobs whose numbers are worked out here."""

from __future__ import annotations

import pytest

from sim.affinity import measure
from sim.node import Job
from sim.types import SimRequest


def request(
    t: float, thread: int, blocks: tuple[int, ...], out: tuple[int, ...] = ()
) -> SimRequest:
    return SimRequest(
        arrival_s=t, key="k", key_hash=1, blocks=blocks, prompt_tokens=16 * len(blocks),
        output_tokens=16, thread=thread, output_blocks=out,
    )  # fmt: skip


def job(rid: int, r: SimRequest, node: int, cached: int, served: bool = True) -> Job:
    j = Job(rid, r)
    j.node, j.cached = node, cached
    j.first_token = r.arrival_s + 0.1 if served else -1.0
    return j


def test_follow_ups_are_measured_against_the_threads_turn_1_and_previous_turn() -> None:
    requests = [
        request(0.0, 7, (1, 2), out=(3,)),  # thread 7, turn 1 (in the warm-up: still turn 1)
        request(5.0, 7, (1, 2, 3, 4)),  # follow-up, reusable 3 blocks (prompt + answer of turn 1)
        request(6.0, 8, (9,)),  # thread 8, turn 1
        request(7.0, 7, (1, 2, 3, 5, 6)),  # follow-up on another node, reusable 3 blocks
        request(8.0, -1, (1,)),  # single-turn: not a follow-up
        request(9.0, 8, (9, 10)),  # follow-up never served: left out
    ]
    nodes = [0, 0, 1, 1, 0, 1]
    cached = [0, 48, 0, 16, 16, 0]
    jobs = [
        job(i, r, n, c, served=i != 5)
        for i, (r, n, c) in enumerate(zip(requests, nodes, cached, strict=True))
    ]
    got = measure(requests, jobs, [3, 1], warmup_s=1.0, block_tokens=16)
    assert got.followups == 2
    assert got.followups_on_first_node == pytest.approx(0.5)
    assert got.followup_cached_fraction == pytest.approx((48 + 16) / (64 + 80))
    assert (got.reusable_tokens, got.delivered_tokens) == (48 + 48, 64)
    assert got.load_cov == pytest.approx(0.5)


def test_a_run_without_threads_has_no_follow_ups() -> None:
    requests = [request(2.0, -1, (1,)), request(3.0, -1, (1,))]
    jobs = [job(i, r, 0, 0) for i, r in enumerate(requests)]
    got = measure(requests, jobs, [2, 2], warmup_s=0.0, block_tokens=16)
    assert (got.followups, got.followup_cached_fraction, got.load_cov) == (0, 0.0, 0.0)
