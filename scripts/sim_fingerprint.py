"""Every registered policy's full metrics under varied cluster settings, as one JSON document.

Speed work on the simulator must not change a result. Run this on the commit before the change
and on the one after, each from its own checkout, and compare the two files byte for byte:

    PYTHONPATH=. .venv/bin/python scripts/sim_fingerprint.py > /tmp/after.json
    cmp /tmp/before.json /tmp/after.json

It covers what the golden study (tests/sim/test_sim_golden.py) does not: every policy in the
registry (the KV-event ones read the engines' caches mid-run), several routers with each front
tier and tree sync, session tokens off, no output caching, a tight scheduler (small budget, few
running slots, refusals), a multi-tenant workload and runs drained to the last request. A few
seconds of CPU.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from dataplane.core.policies.registry import POLICIES
from sim.cluster import ClusterConfig, simulate
from sim.engine_model import get_profile
from sim.presets import calibrated_paper_options
from sim.study import RunSettings, run_study
from sim.workloads.paper import PaperWorkload
from sim.workloads.registry import make_workload


def fingerprint() -> dict[str, Any]:
    base = RunSettings(
        profile=get_profile("paper-testbed").with_overrides(kv_blocks=1500),
        q_cap=3.0, nodes=4, duration_s=30.0, warmup_s=5.0, prewarm_s=20.0, abort_above_s=5.0,
    )  # fmt: skip
    tight = base.profile.with_overrides(kv_blocks=400, max_batched_tokens=512, max_running=6)
    variants = {
        "base": base,
        "r2-key-sync": replace(base, routers=2, front="key", tree_sync_s=0.5),
        "r3-session": replace(base, routers=3, front="session", echo_tokens=False),
        "nocacheout": replace(base, cache_outputs=False, snapshot_interval_s=0.1),
        "tight": replace(base, profile=tight, abort_above_s=None, timeout_s=8.0),
    }
    workloads = {
        "paper": PaperWorkload(top_k=16, **calibrated_paper_options()),
        "tenants": make_workload("tenants"),
    }
    out: dict[str, Any] = {}
    for wname, workload in workloads.items():
        for vname, settings in variants.items():
            records = run_study(workload, list(POLICIES), settings, ladder=(4.0, 12.0), seeds=(2,))
            for r in records:
                out[f"{wname}/{vname}/{r.policy}/{r.qps:g}"] = r.metrics.to_dict()
    requests = workloads["paper"].requests(qps=6.0, duration_s=20.0, seed=5)
    drained = (
        ClusterConfig(profile=base.profile, nodes=3, drain_all=True, seed=1),
        ClusterConfig(
            profile=base.profile.with_overrides(max_batched_tokens=300), nodes=2,
            drain_all=True, routers=2, front="session",
        ),
    )  # fmt: skip
    for name in POLICIES:
        for config in drained:
            try:
                metrics = simulate(requests, name, config)
            except Exception as exc:  # a policy that needs a table: recorded, not fatal
                out[f"drain/{name}/{config.nodes}"] = repr(exc)
                continue
            out[f"drain/{name}/{config.nodes}"] = metrics.to_dict()
    return out


if __name__ == "__main__":
    json.dump(fingerprint(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
