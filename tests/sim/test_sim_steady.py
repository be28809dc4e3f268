"""Steady-state runs: the pre-warm replay stands in for a long simulated warm-up."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.cluster import ClusterConfig, simulate
from sim.engine_model import LLAMA_70B
from sim.planning import make_stream
from sim.steady import converged_prewarm_s, warm_time
from sim.study import RunSettings, run_task
from sim.workloads.paper import PaperWorkload

WORKLOAD = PaperWorkload(top_k=16, rag_scope="conversation")
PROFILE = LLAMA_70B.with_overrides(kv_blocks=4000)


def test_warm_time_finds_where_a_rising_curve_flattens() -> None:
    curve = [0.1, 0.2, 0.3, 0.4, 0.5] + [0.6] * 12 + [0.0]  # last bucket partial, dropped
    start, converged = warm_time(curve, 30.0, 0.01)
    assert start == 30.0 * 5  # buckets 4..6 average 0.567 < 0.59; 5..7 are on the plateau
    assert converged


def test_warm_time_reports_a_curve_still_rising() -> None:
    curve = [0.01 * i for i in range(20)]
    _, converged = warm_time(curve, 30.0, 0.01)
    assert not converged


def _hit(policy: str, *, prewarm_s: float, warmup_s: float) -> float:
    stream = make_stream(
        WORKLOAD, qps=6.0, duration_s=warmup_s + 300.0, seed=4, prior_window_s=60.0,
        prewarm_s=prewarm_s,
    )  # fmt: skip
    config = ClusterConfig(profile=PROFILE, nodes=4, warmup_s=warmup_s, seed=4)
    return simulate(stream.requests, policy, config, None, stream.prewarm).kv_hit


@pytest.mark.parametrize("policy", ["flat", "sticky"])
def test_a_prewarmed_run_hits_like_a_long_simulated_warmup(policy: str) -> None:
    cold = _hit(policy, prewarm_s=0.0, warmup_s=0.0)
    simulated = _hit(policy, prewarm_s=0.0, warmup_s=900.0)
    replayed = _hit(policy, prewarm_s=900.0, warmup_s=0.0)
    assert cold < simulated - 0.03  # the cold start matters
    assert replayed == pytest.approx(simulated, abs=0.02)


def test_the_convergence_check_sizes_the_prewarm_and_the_protocol_is_recorded() -> None:
    check = converged_prewarm_s(WORKLOAD, qps=6.0, nodes=4, kv_blocks=PROFILE.kv_blocks)
    assert check.converged
    assert check.prewarm_s >= 1.5 * check.warm_at_s > 0
    settings = RunSettings(
        profile=PROFILE, q_cap=3.0, nodes=4, duration_s=60.0, warmup_s=10.0, prewarm_s=None
    )
    record = run_task(WORKLOAD, ["flat"], settings, qps=6.0, seed=1)[0]
    assert record.protocol is not None
    assert record.protocol.prewarm_s == check.prewarm_s
    assert record.protocol.measure_s == 50.0
    assert "pre-warm" in record.protocol.describe()
    fixed = run_task(WORKLOAD, ["flat"], replace(settings, prewarm_s=0.0), qps=6.0, seed=1)[0]
    assert fixed.protocol is not None and fixed.protocol.prewarm_s == 0.0
