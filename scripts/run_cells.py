"""Run single (seed, QPS) cells of a capacity study, saving each run as it finishes (issue 22).

    nice -n 10 .venv/bin/python scripts/run_cells.py OUT.json PROFILE POLICY SEED:QPS... \
        [routers=N] [front=key] [tree_sync_s=S] [echo=off] [param.NAME=VALUE]

For a machine too busy for a whole study in one process: the steady-state protocol, settings and
q_cap of ``cachectl sim capacity --workload paper --profile PROFILE`` (q_cap as every study
measured it), one cell at a time, each appended to OUT.json (``runs``, the study JSON's format)
when done, so cells can run in several processes and a stopped session keeps what finished.
``echo=off``: clients do not echo session tokens (``cachectl sim capacity --no-session-echo``).
Each cell prints its p99, KV hit and imbalance as it finishes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cachectl.sim_settings import option_value
from sim.engine_model import get_profile
from sim.presets import calibrated_paper_options
from sim.study import STEADY_DURATION_S, STEADY_WARMUP_S, RunSettings, run_single
from sim.workloads.registry import make_workload

Q_CAP = {"paper-testbed": 3.055, "llama-3.3-70b-fp8-tp2-h100": 20.25}


def main() -> int:
    out, profile, policy, *rest = sys.argv[1:]
    cells = [c for c in rest if "=" not in c]
    extra: dict[str, Any] = {}
    params: dict[str, Any] = {}
    for item in (c for c in rest if "=" in c):
        name, _, value = item.partition("=")
        if name.startswith("param."):
            params[name.removeprefix("param.")] = option_value(value)
        elif name == "echo":
            extra["echo_tokens"] = value != "off"
        else:
            extra[name] = value if name == "front" else float(value)
    if "routers" in extra:
        extra["routers"] = int(extra["routers"])
    workload = make_workload("paper", **(calibrated_paper_options() | {"top_k": 128}))
    settings = RunSettings(
        profile=get_profile(profile), q_cap=Q_CAP[profile], duration_s=STEADY_DURATION_S,
        warmup_s=STEADY_WARMUP_S, prewarm_s=None, abort_above_s=5.0,
        policy_params={policy: params}, **extra,
    )  # fmt: skip
    path = Path(out)
    for cell in cells:
        seed, qps = cell.split(":")
        record = run_single(workload, policy, settings, qps=float(qps), seed=int(seed))
        runs = json.loads(path.read_text())["runs"] if path.exists() else []
        runs.append({"policy": policy, "seed": record.seed, "qps": record.qps,
                     "wall_s": record.wall_s, **record.metrics.to_dict()})  # fmt: skip
        document = {"profile": profile, "q_cap": settings.q_cap, "settings": extra,
                    "policy_params": params, "runs": runs}  # fmt: skip
        path.write_text(json.dumps(document, indent=1) + "\n")
        m = record.metrics
        print(
            f"{policy} {params} seed {seed} @ {qps}: p99 {m.ttft_p99_s:.3f} s, "
            f"hit {m.kv_hit:.2%}, imbalance {m.imbalance:.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
