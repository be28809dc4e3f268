"""Claude Code sessions replay: the reader reproduces the README; instances are separate users."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from sim.workloads.claude_code import ClaudeCodeWorkload, read_claude_code
from sim.workloads.mooncake import TraceError
from sim.workloads.stats import hit_blocks

SESSIONS = "weka_claude_code_sessions.jsonl.gz"


def _row(session: str, t: float, tokens: int, ranges: list[list[int]]) -> dict[str, object]:
    return {
        "session": session,
        "agent": None,
        "t": t,
        "in": tokens,
        "out": 7,
        "hash_ranges": ranges,
    }


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    rows = [
        _row("a", 0.0, 64 * 3 + 10, [[1, 3]]),
        _row("a", 5.0, 64 * 5, [[1, 3], [4, 5]]),  # 3 blocks seen before, then 2 new
        _row("a", 9.0, 64 * 4, [[1, 2], [6, 7]]),  # diverges after block 2
        _row("b", 0.0, 64 * 2, [[1, 2]]),  # ids local to session b: no relation to a's 1, 2
    ]
    path = tmp_path / "tiny.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def test_tiny_sessions_ideal_hit_counts_seen_blocks_within_each_session(tiny: Path) -> None:
    trace = read_claude_code(tiny)
    assert trace.sessions == ("a", "b")
    hit_tokens = 0 + 3 * 64 + 2 * 64 + 0
    assert trace.ideal_hit() == pytest.approx(hit_tokens / (202 + 320 + 256 + 128))


def test_tiny_replay_splits_64_token_ids_and_gives_the_tail_its_own_block(tiny: Path) -> None:
    workload = ClaudeCodeWorkload(tiny)
    replay = workload.sample(qps=4.0, duration_s=200.0, seed=1)
    requests = workload.build(replay)
    assert [len(r.blocks) for r in requests] == [-(-r.prompt_tokens // 16) for r in requests]
    for r, rec in zip(requests, replay.request.tolist(), strict=True):
        assert r.prompt_tokens == read_claude_code(tiny).input_tokens[rec]


def test_bad_ranges_are_reported_with_their_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_row("a", 0.0, 64 * 3, [[1, 2]])) + "\n")
    with pytest.raises(TraceError, match=r"bad.jsonl:1: hash_ranges do not cover"):
        read_claude_code(path)


@pytest.mark.traces
def test_sessions_file_matches_the_readme(traces_dir: Path) -> None:
    trace = read_claude_code(traces_dir / SESSIONS)
    assert len(trace.sessions) == 710
    assert len(trace) == 49_334
    assert trace.input_tokens.mean() == pytest.approx(122_379, abs=1)
    assert trace.ideal_hit() == pytest.approx(0.963, abs=0.0005)


@pytest.mark.traces
def test_replay_has_the_target_rate_on_average(traces_dir: Path) -> None:
    workload = ClaudeCodeWorkload(traces_dir / SESSIONS)
    counts = [len(workload.sample(qps=2.0, duration_s=300.0, seed=s).request) for s in range(20)]
    # Sessions are bursty (one can send dozens of requests in a window), hence 20 seeds.
    assert np.mean(counts) / 300.0 == pytest.approx(2.0, rel=0.1)


@pytest.mark.traces
def test_replayed_hits_are_the_sessions_own_reuse(traces_dir: Path) -> None:
    workload = ClaudeCodeWorkload(traces_dir / SESSIONS)
    trace = workload.trace()
    replay = workload.sample(qps=0.5, duration_s=600.0, seed=3)
    requests = workload.build(replay)
    assert len(requests) > 100
    # Reference: 4 x the 64-token ids of a request already sent earlier by the same instance.
    seen: dict[int, set[int]] = defaultdict(set)
    expected = []
    for inst, rec in zip(replay.instance.tolist(), replay.request.tolist(), strict=True):
        runs = range(trace.run_start[rec], trace.run_start[rec + 1])
        ids = {i for r in runs for i in range(trace.run_lo[r], trace.run_hi[r] + 1)}
        expected.append(4 * len(ids & seen[inst]))
        seen[inst] |= ids
    assert hit_blocks(requests, "global").tolist() == expected  # no sharing across instances
    assert hit_blocks(requests, "key").tolist() == expected


@pytest.mark.traces
def test_same_seed_same_replay(traces_dir: Path) -> None:
    workload = ClaudeCodeWorkload(traces_dir / SESSIONS)
    a = workload.requests(qps=0.5, duration_s=60.0, seed=9)
    b = workload.requests(qps=0.5, duration_s=60.0, seed=9)
    assert a == b
    assert all(0 <= r.arrival_s < 60.0 for r in a)
