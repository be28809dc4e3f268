"""The golden configuration: a small steady-state capacity study of every Table 1 policy, plus
``cacheroute_online`` (issue 22: its cells were added; no existing cell moved).

Shared by the golden test and its regeneration command, which writes the checked-in values
(run it only from code whose output is known good, e.g. before a speed change):

    .venv/bin/python -m tests.sim.golden_config > tests/sim/golden/steady_capacity.json
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sim.engine_model import get_profile
from sim.presets import TABLE1_POLICIES, calibrated_paper_options
from sim.steady import converged_prewarm_s
from sim.study import RunSettings, run_study
from sim.workloads.paper import PaperWorkload

# 4 destinations with a small KV cache (so evictions, pinning and refusals all happen), a fixed
# pre-warm window, an overloaded top rung (abort at 5 s) and two seeds.
NODES = 4
KV_BLOCKS = 1500
LADDER = (4.0, 9.0, 16.0)
SEEDS = (2, 3)
POLICIES = (*TABLE1_POLICIES, "cacheroute_online")


def settings() -> RunSettings:
    profile = get_profile("paper-testbed").with_overrides(kv_blocks=KV_BLOCKS)
    return RunSettings(
        profile=profile,
        q_cap=3.0,
        nodes=NODES,
        duration_s=40.0,
        warmup_s=10.0,
        prewarm_s=60.0,
        abort_above_s=5.0,
    )


def workload() -> PaperWorkload:
    return PaperWorkload(top_k=16, **calibrated_paper_options())


def golden() -> dict[str, Any]:
    """Every run's full metrics plus one convergence check, keyed for a readable diff."""
    records = run_study(workload(), POLICIES, settings(), ladder=LADDER, seeds=SEEDS, jobs=1)
    runs = {f"{r.policy}/{r.seed}/{r.qps:g}": r.metrics.to_dict() for r in records}
    # Two routers, each with its own view and policy instance (history split between them).
    routers = run_study(
        workload(), POLICIES, replace(settings(), routers=2), ladder=(9.0,), seeds=(2,)
    )
    runs |= {f"{r.policy}/{r.seed}/{r.qps:g}/routers=2": r.metrics.to_dict() for r in routers}
    check = converged_prewarm_s(workload(), qps=20.0, nodes=NODES, kv_blocks=KV_BLOCKS)
    return {
        "runs": runs,
        "convergence": {
            "warm_at_s": check.warm_at_s,
            "prewarm_s": check.prewarm_s,
            "converged": check.converged,
            "hit_by_bucket": list(check.hit_by_bucket),
        },
    }


if __name__ == "__main__":
    print(json.dumps(golden(), indent=1, sort_keys=True))
