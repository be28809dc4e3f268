"""The plan beats Flat-LB on real engines, by cached-token share, measured in the same run.

Marked ``llamacpp``: three real ``llama-server`` engines × 2 slots with no RAM prompt cache (so
an engine holds two prefixes), one agent each, a control plane and one router per arm (Flat-LB,
the plan), driven by the real-engine benchmark's own procedure (:mod:`tests.support.real_bench`,
the one ``bench/bench_real_engine.py`` runs at full size): a warm-up for live rates, a plan built
from them, then the arms interleaved over two repeats of the same schedule. Six tenants with
≈ 600-character prefixes and Zipf popularity fit the fleet's six slots only when each tenant
keeps to one engine, which is what a plan does and Flat-LB does not.

It asserts what does not depend on CPU speed: the cached-token share (the answers' own
``usage.prompt_tokens_details.cached_tokens``, cross-checked against the engines' counters) of
the plan is at least Flat-LB's + 20 points. Latency is printed, never asserted, so it passes
under a CPU hog: a slower engine answers later, not from a different cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.llamacpp import require_binary
from tests.support.real_bench import run_benchmark
from tests.support.real_fleet import FleetSpec, RealFleet
from tests.support.real_workload import RunSummary, Workload

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

ARMS = ("flat", "cacheroute")


def _pooled(runs: list[RunSummary], arm: str) -> tuple[float, float]:
    """(clients' cached share, engines' cached share) of an arm over its repeats."""
    mine = [r for r in runs if r.arm == arm]
    prompt = sum(r.prompt_tokens for r in mine)
    engine = sum(r.engine_cached + r.engine_processed for r in mine)
    return (
        sum(r.cached_tokens for r in mine) / prompt,
        sum(r.engine_cached for r in mine) / engine,
    )


async def test_the_plans_cached_share_beats_flat_lb_by_20_points(tmp_path: Path) -> None:
    spec = FleetSpec(engines=3, slots=2, context=4096, policies=ARMS)
    workload = Workload(tenants=6, prefix_chars=600, rate_per_s=2.0, requests=40)
    with RealFleet(spec, require_binary(), tmp_path / "fleet") as fleet:
        fleet.start()
        await fleet.wait_ready(180.0)
        runs = await run_benchmark(
            fleet, ARMS, workload, repeats=2, warmup_s=25.0, seed=7, say=print
        )
    assert all(r.failed == 0 for r in runs), runs
    flat, flat_engines = _pooled(runs, "flat")
    plan, plan_engines = _pooled(runs, "cacheroute")
    # The clients' usage and the engines' own counters tell the same story (within 3 points).
    assert abs(flat - flat_engines) < 0.03 and abs(plan - plan_engines) < 0.03
    assert plan >= flat + 0.20, f"plan {plan:.1%} vs Flat-LB {flat:.1%}"
