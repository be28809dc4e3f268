"""Trace replay loses nothing: every request of a finite trace is simulated once."""

from __future__ import annotations

from pathlib import Path

from sim.engine_model import LLAMA_70B
from sim.study import RunSettings, run_single
from sim.workloads.mooncake import MooncakeWorkload


def test_a_one_node_unbounded_replay_serves_every_request_of_the_synthetic_trace(
    traces_dir: Path,
) -> None:
    workload = MooncakeWorkload(path=traces_dir / "mooncake_synthetic_trace.jsonl")
    settings = RunSettings(
        profile=LLAMA_70B.with_overrides(kv_blocks=100_000_000), q_cap=1.0, nodes=1,
        duration_s=100_000.0, warmup_s=0.0, timeout_s=100_000.0, prewarm_s=0.0,
    )  # fmt: skip
    record = run_single(workload, "flat", settings, qps=0.5, seed=1)
    assert record.metrics.requests == len(workload.trace()) == 3993
    assert record.metrics.served == 3993
    assert record.metrics.refused == 0
    assert record.metrics.failures == 0.0
