"""Mooncake trace replay: the reader reproduces the README, the replay keeps prefixes and time."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sim.types import SimRequest
from sim.workloads.mooncake import MooncakeWorkload, TraceError, read_mooncake
from sim.workloads.stats import consecutive_common_blocks, ideal_hit

CONVERSATION = "mooncake_conversation_trace.jsonl"
SYNTHETIC = "mooncake_synthetic_trace.jsonl"


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(ms: int, tokens: int, ids: list[int], out: int = 10) -> dict[str, object]:
    return {"timestamp": ms, "input_length": tokens, "output_length": out, "hash_ids": ids}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """Three requests on one timestamp tick, then one later; all start with block 0."""
    return _write(
        tmp_path / "tiny.jsonl",
        [
            _row(0, 600, [0, 1]),
            _row(0, 1100, [0, 1, 2]),  # continues the first request
            _row(0, 700, [0, 3]),
            _row(3000, 1100, [0, 1, 4]),
        ],
    )


def test_tiny_trace_keys_on_two_blocks_when_all_share_the_first(tiny: Path) -> None:
    workload = MooncakeWorkload(tiny)
    assert workload.key_block_count() == 2
    keys = [r.key for r in workload.requests(qps=1.0, duration_s=100, seed=0)]
    assert keys == ["mc:0.1", "mc:0.1", "mc:0.3", "mc:0.1"]


def test_sub_blocks_preserve_the_traces_prefix_sharing(tiny: Path) -> None:
    requests = MooncakeWorkload(tiny).requests(qps=1.0, duration_s=100, seed=0)
    assert [len(r.blocks) for r in requests] == [38, 69, 44, 69]
    assert requests[1].blocks[:64] == requests[3].blocks[:64]  # blocks 0 and 1 of 512 tokens
    assert requests[1].blocks[64] != requests[3].blocks[64]
    assert requests[0].blocks[:32] == requests[2].blocks[:32]  # block 0 only
    assert requests[0].blocks[32] != requests[2].blocks[32]


def test_ties_are_spread_inside_their_slot_in_file_order(tiny: Path) -> None:
    requests = MooncakeWorkload(tiny).requests(qps=1.0, duration_s=100, seed=0)
    times = [r.arrival_s for r in requests]
    # Natural rate: 4 requests over 3 s + one mean gap (1 s) = 1 QPS, so seconds stay seconds.
    assert times[0] == 0.0
    assert 0 < times[1] <= times[2] < 3.0
    assert times[3] == pytest.approx(3.0)


def test_bad_lines_are_reported_with_their_line_number(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", [_row(0, 600, [0, 1]), _row(5, 600, [0])])
    with pytest.raises(TraceError, match=r"bad.jsonl:2: hash_ids do not cover"):
        read_mooncake(path)


@pytest.mark.traces
def test_conversation_trace_matches_the_readme(traces_dir: Path) -> None:
    trace = read_mooncake(traces_dir / CONVERSATION)
    assert len(trace) == 12_031
    assert trace.input_tokens.mean() == pytest.approx(12_035, abs=1)
    assert trace.timestamp_ms[-1] / 1000 == pytest.approx(3_537, abs=1)
    keys = Counter(trace.keys(2))
    assert len(keys) == 7_373
    assert sum(1 for n in keys.values() if n == 1) == 5_114
    assert trace.ideal_hit() == pytest.approx(0.374, abs=0.0005)
    assert MooncakeWorkload(traces_dir / CONVERSATION).key_block_count() == 2


@pytest.mark.traces
def test_synthetic_trace_matches_the_readme(traces_dir: Path) -> None:
    trace = read_mooncake(traces_dir / SYNTHETIC)
    assert len(trace) == 3_993
    assert trace.input_tokens.mean() == pytest.approx(15_325, abs=1)
    assert len(set(trace.keys(1))) == 2_211
    assert trace.ideal_hit() == pytest.approx(0.651, abs=0.0005)
    assert MooncakeWorkload(traces_dir / SYNTHETIC).key_block_count() == 1


@pytest.mark.traces
def test_full_replay_at_16_tokens_has_the_traces_ideal_hit(traces_dir: Path) -> None:
    requests = MooncakeWorkload(traces_dir / SYNTHETIC).requests(qps=100.0, duration_s=1e6, seed=0)
    assert len(requests) == 3_993
    assert ideal_hit(requests) == pytest.approx(read_mooncake(traces_dir / SYNTHETIC).ideal_hit())


@pytest.mark.traces
@pytest.mark.slow
def test_full_conversation_replay_has_the_readmes_37_4_percent_hit(traces_dir: Path) -> None:
    requests = MooncakeWorkload(traces_dir / CONVERSATION).requests(
        qps=100.0, duration_s=1e6, seed=0
    )
    assert ideal_hit(requests) == pytest.approx(0.374, abs=0.0005)


@pytest.mark.traces
def test_replay_is_scaled_to_the_target_qps_and_cut_at_the_duration(traces_dir: Path) -> None:
    workload = MooncakeWorkload(traces_dir / SYNTHETIC)
    full = workload.requests(qps=50.0, duration_s=1e6, seed=0)
    assert len(full) / full[-1].arrival_s == pytest.approx(50.0, rel=0.01)
    window = workload.requests(qps=50.0, duration_s=30.0, seed=0)
    assert len(window) == pytest.approx(1_500, rel=0.1)
    assert max(r.arrival_s for r in window) < 30.0
    assert [r.blocks for r in window] == [r.blocks for r in full[: len(window)]]


@pytest.mark.traces
def test_other_seeds_rotate_the_trace_and_keep_every_request_once(traces_dir: Path) -> None:
    workload = MooncakeWorkload(traces_dir / SYNTHETIC)

    def shape(requests: list[SimRequest]) -> Counter[tuple[int, int, int]]:
        return Counter((r.prompt_tokens, r.output_tokens, r.blocks[0]) for r in requests)

    base = workload.requests(qps=100.0, duration_s=1e6, seed=0)
    other = workload.requests(qps=100.0, duration_s=1e6, seed=7)
    assert base[0].blocks != other[0].blocks
    assert shape(base) == shape(other)


@pytest.mark.traces
def test_poisson_retiming_keeps_the_trace_order(traces_dir: Path) -> None:
    trace_order = MooncakeWorkload(traces_dir / SYNTHETIC).requests(
        qps=50.0, duration_s=20.0, seed=0
    )
    poisson = MooncakeWorkload(traces_dir / SYNTHETIC, arrival="poisson").requests(
        qps=50.0, duration_s=20.0, seed=0
    )
    n = min(len(trace_order), len(poisson))
    assert [r.blocks for r in poisson[:n]] == [r.blocks for r in trace_order[:n]]
    gaps = np.diff([r.arrival_s for r in poisson])
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)


@pytest.mark.traces
def test_conversation_keys_group_continuing_requests(traces_dir: Path) -> None:
    requests = MooncakeWorkload(traces_dir / CONVERSATION).requests(
        qps=20.0, duration_s=60.0, seed=0
    )
    # Consecutive requests of one key share at least the two 512-token blocks forming the key
    # (one-block keys share at least the shared first block).
    assert consecutive_common_blocks(requests).min() >= 32
