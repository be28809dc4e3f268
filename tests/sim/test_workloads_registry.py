"""Workloads by name: the registry builds each one, detects trace formats, names bad options."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sim.workloads import WORKLOADS, UnknownWorkloadError, WorkloadOptionError, make_workload
from sim.workloads.claude_code import ClaudeCodeWorkload
from sim.workloads.lowshare import LowShareWorkload
from sim.workloads.mooncake import MooncakeWorkload, TraceError
from sim.workloads.paper import PaperWorkload
from sim.workloads.whales import WhalesWorkload

MOONCAKE_ROW = {"timestamp": 0, "input_length": 20, "output_length": 3, "hash_ids": [0]}
CLAUDE_ROW = {"session": "s", "agent": None, "t": 0.0, "in": 64, "out": 3, "hash_ranges": [[1, 1]]}


def test_registry_lists_the_five_workloads() -> None:
    assert list(WORKLOADS) == ["paper", "whales", "lowshare", "tenants", "trace"]


@pytest.mark.parametrize(
    ("name", "cls"),
    [("paper", PaperWorkload), ("whales", WhalesWorkload), ("lowshare", LowShareWorkload)],
)
def test_synthetic_workloads_are_built_by_name_with_options(name: str, cls: type) -> None:
    workload = make_workload(name, top_k=32, arrival="gamma", cv=2.5)
    assert isinstance(workload, cls)
    assert workload.name == name
    requests = workload.requests(qps=10.0, duration_s=5.0, seed=1)
    assert requests and len({r.key for r in requests}) <= 32 + 4


def test_paper_defaults_to_the_flagship_active_set() -> None:
    workload = make_workload("paper")
    assert isinstance(workload, PaperWorkload)
    assert workload.top_k == 128
    assert workload.arrival == "poisson"


def test_unknown_workload_lists_the_known_ones() -> None:
    known = "known: paper, whales, lowshare, tenants, trace"
    with pytest.raises(UnknownWorkloadError, match=known):
        make_workload("nope")


def test_unknown_option_is_named_with_the_accepted_ones() -> None:
    with pytest.raises(WorkloadOptionError, match=r"does not take topk; it takes top_k"):
        make_workload("paper", topk=5)


def test_trace_needs_a_path() -> None:
    with pytest.raises(WorkloadOptionError, match="path"):
        make_workload("trace")


def test_trace_detects_mooncake_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(MOONCAKE_ROW) + "\n")
    workload = make_workload("trace", path=path)
    assert isinstance(workload, MooncakeWorkload)
    assert workload.name == "trace"


def test_trace_detects_claude_code_sessions_gzipped_or_not(tmp_path: Path) -> None:
    plain = tmp_path / "c.jsonl"
    plain.write_text(json.dumps(CLAUDE_ROW) + "\n")
    packed = tmp_path / "c.jsonl.gz"
    with gzip.open(packed, "wt") as f:
        f.write(json.dumps(CLAUDE_ROW) + "\n")
    for path in (plain, packed):
        assert isinstance(make_workload("trace", path=path), ClaudeCodeWorkload)


def test_trace_options_depend_on_the_format(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(CLAUDE_ROW) + "\n")
    with pytest.raises(WorkloadOptionError, match="does not take key_blocks"):
        make_workload("trace", path=path, key_blocks=1)


def test_unrecognised_trace_content_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"prompt": "hi"}\n')
    with pytest.raises(TraceError, match="neither Mooncake"):
        make_workload("trace", path=path)


def test_missing_trace_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"missing\.jsonl"):
        make_workload("trace", path=tmp_path / "missing.jsonl")


@pytest.mark.traces
def test_shared_traces_are_detected(traces_dir: Path) -> None:
    conversation = make_workload("trace", path=traces_dir / "mooncake_conversation_trace.jsonl")
    sessions = make_workload("trace", path=traces_dir / "weka_claude_code_sessions.jsonl.gz")
    assert isinstance(conversation, MooncakeWorkload)
    assert isinstance(sessions, ClaudeCodeWorkload)
