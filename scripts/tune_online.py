"""Choose the online step's parameters on the TUNING seeds (2, 3) only (issues 22, 30).

    nice -n 10 .venv/bin/python scripts/tune_online.py OUT.json [STAGE...]

Issue 30's stage ``remember`` (``cacheroute_conversation``, clients NOT echoing tokens): this
router's conversation memory off (0) or on (65,536) at the deciding cells, paper-testbed 160 QPS
with 1 and 16 routers, the public H100 profile at 900 QPS. The bound, spread and tail stay the
online step's frozen values (no other parameter is tuned).

Stages (each a small grid on the rungs that decide the comparison; one process, ``--jobs 1``;
cut to what a machine shared by ~10 jobs allowed, see docs/results.md §5):

* ``eps``: epsilon 0.5 / 0.75 / 1.0 (spread 2) on paper-testbed at 160 and 180 QPS, one router;
* ``public``: epsilon 0.5 / 0.75 (spread 2) on the public H100 profile at 900 QPS (the paper's
  policy's 5 s cliff), one router;
* ``routers16``: spread 2 / 4 at 16 routers on paper-testbed at 160 QPS;
* ``tail``: the cold tail (p2c vs chwbl) at top-K256 on paper-testbed at 160 QPS.

Every run's p99 TTFT is written to OUT.json as it finishes (a stopped session keeps what ran).
The held-out seeds 4-6 are never run here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.engine_model import get_profile
from sim.presets import calibrated_paper_options
from sim.study import STEADY_DURATION_S, STEADY_WARMUP_S, RunSettings, run_study
from sim.workloads.registry import make_workload

TUNING_SEEDS = (2, 3)
POLICY = "cacheroute_online"
STAGE_POLICY = {"remember": "cacheroute_conversation"}  # the stages of another policy
# q_cap as every study measures it (the single-destination knee; docs/results.md §3, §4.4, §4.6)
JOBS = int(os.environ.get("JOBS", "1"))
Q_CAP = {"paper-testbed": 3.055, "llama-3.3-70b-fp8-tp2-h100": 20.25, "k256": 2.672}


def settings(profile: str, q_cap: float, **extra: Any) -> RunSettings:
    return RunSettings(
        profile=get_profile(profile), q_cap=q_cap, duration_s=STEADY_DURATION_S,
        warmup_s=STEADY_WARMUP_S, prewarm_s=None, abort_above_s=5.0, **extra,
    )  # fmt: skip


Config = tuple[str, str, int, tuple[float, ...], dict[str, Any], dict[str, Any]]


def stages(names: list[str]) -> list[Config]:
    """(stage, profile, top_k, ladder, params, settings extras) per configuration."""
    out: list[Config] = []
    testbed, public = "paper-testbed", "llama-3.3-70b-fp8-tp2-h100"
    if "eps" in names:  # epsilon at spread 2, one router, the testbed's deciding rungs
        for eps in (0.5, 0.75, 1.0):
            p = {"epsilon": eps, "spread": 2}
            out.append(("eps", testbed, 128, (160.0, 180.0), p, {}))
    if "public" in names:  # the public profile's 5 s cliff was at 900 QPS
        for eps in (0.5, 0.75):
            p = {"epsilon": eps, "spread": 2}
            out.append(("public", public, 128, (900.0,), p, {}))
    if "routers16" in names:  # herding: spread at 16 routers
        for spread in (2, 4):
            p = {"spread": spread}
            out.append(("routers16", testbed, 128, (160.0,), p, {"routers": 16}))
    if "remember" in names:  # issue 30: no echo; memory off / on; 1 and 16 routers; public
        off = {"echo_tokens": False}
        for remember in (0, 65_536):
            p = {"remember": remember}
            out.append(("remember", testbed, 128, (160.0,), p, off))
            out.append(("remember", testbed, 128, (160.0,), p, off | {"routers": 16}))
            out.append(("remember", public, 128, (900.0,), p, off))
    if "tail" in names:  # the cold tail exists only when the active set outgrows the warm slots
        out.extend(("tail", testbed, 256, (160.0,), {"tail": t}, {}) for t in ("p2c", "chwbl"))
    return out


def main() -> int:
    out = Path(sys.argv[1])
    names = sys.argv[2:] or ["eps", "public", "routers16", "tail"]
    base = dict(calibrated_paper_options())
    done: list[dict[str, Any]] = json.loads(out.read_text())["runs"] if out.exists() else []
    seen = {(r["stage"], json.dumps(r["params"], sort_keys=True), r["profile"], r["routers"],
             r["top_k"], r["seed"], r["qps"]) for r in done}  # fmt: skip
    workloads: dict[int, Any] = {}
    for stage, profile, top_k, ladder, params, extra in stages(names):
        workload = workloads.get(top_k) or workloads.setdefault(
            top_k, make_workload("paper", **(base | {"top_k": top_k}))
        )
        q_cap = Q_CAP["k256"] if top_k == 256 else Q_CAP[profile]
        policy = STAGE_POLICY.get(stage, POLICY)
        run = replace(settings(profile, q_cap, **extra), policy_params={policy: params})
        routers = extra.get("routers", 1)
        key = (stage, json.dumps(params, sort_keys=True), profile, routers, top_k)
        todo = [q for q in ladder if any((*key, s, q) not in seen for s in TUNING_SEEDS)]
        if not todo:
            continue
        started = time.perf_counter()
        records = run_study(workload, [policy], run, ladder=todo, seeds=TUNING_SEEDS, jobs=JOBS)
        for r in records:
            m = r.metrics
            done.append({"stage": stage, "policy": policy, "params": params, "profile": profile,
                         "routers": routers, "echo": extra.get("echo_tokens", True),
                         "top_k": top_k, "seed": r.seed, "qps": r.qps, "p99_s": m.ttft_p99_s,
                         "p99_censored": m.p99_censored, "kv_hit": m.kv_hit,
                         "imbalance": m.imbalance, "failures": m.failures})  # fmt: skip
        out.write_text(json.dumps({"tuning_seeds": TUNING_SEEDS, "runs": done}, indent=1) + "\n")
        print(f"{stage} {profile} K{top_k} x{routers} {params}: {len(records)} runs, "
              f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
