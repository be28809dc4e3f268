"""The flags ``cachectl sim`` declares, with the defaults ``--help`` spells out.

Apart from :mod:`cachectl.sim_cmd` (the handlers) and :mod:`cachectl.sim_settings` (what the
values mean), so the command line reads as one list.
"""

from __future__ import annotations

import argparse

from sim import presets
from sim.cluster import DEFAULT_SNAPSHOT_S, DEFAULT_TIMEOUT_S, FRONTS
from sim.engine_model import PROFILES
from sim.planning import DEFAULT_PLAN_WINDOW_S, DEFAULT_SLOTS_PER_NODE
from sim.report import key_of
from sim.study import STEADY_DURATION_S, STEADY_WARMUP_S, default_jobs

KNEE_SLO_S = 3.5


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every ``cachectl sim`` command: workload, cluster, engine, run."""
    add = parser.add_argument
    add("--workload", required=True, help="workload name from the workload registry")
    add("--trace", metavar="PATH", help="trace file for --workload trace (Mooncake or Claude Code)")
    add("--top-k", type=int, metavar="K", help="active set: top K keys (paper default: 128)")
    add("--option", action="append", default=[], metavar="NAME=VALUE",
        help="another workload option, e.g. arrival=gamma (repeatable)")  # fmt: skip
    add("--nodes", type=int, metavar="R", help="destinations (default 30, every preset)")
    add("--profile", choices=list(PROFILES), help="engine profile (default: the workload's "
        "testbed: paper/trace 70B, whales 8B, lowshare Qwen3-32B)")  # fmt: skip
    add("--kv-blocks", type=int, metavar="B", help="override the profile's KV blocks per node")
    add("--routers", type=int, default=1, metavar="N", help="simulated routers (default 1)")
    add("--snapshot-ms", type=float, default=DEFAULT_SNAPSHOT_S * 1000, metavar="MS",
        help="load snapshot interval (default 250 ms)")  # fmt: skip
    add("--warmup", type=float, metavar="S", help="simulated seconds excluded from metrics "
        f"(default min({STEADY_WARMUP_S:g}, duration/5))")  # fmt: skip
    add("--plan-window", type=float, default=DEFAULT_PLAN_WINDOW_S, metavar="S",
        help="prior window the plan's rates are estimated on (default 60 s)")  # fmt: skip
    add("--q-cap", type=float, metavar="Q", help="per-destination load target (default: "
        "measured as the single-destination knee)")  # fmt: skip
    add("--knee-slo", type=float, default=KNEE_SLO_S, metavar="S",
        help="p99 TTFT bound of the q_cap knee (default 3.5 s)")  # fmt: skip
    add("--slots", type=int, default=DEFAULT_SLOTS_PER_NODE, metavar="W",
        help="warm slots per destination (default 8, the paper's)")  # fmt: skip
    add("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
        help="TTFT past this is a failure (default 30 s)")  # fmt: skip
    add("--prewarm", default="auto", metavar="S|auto",
        help="seconds of the preceding window replayed into caches and policies before the run "
        "(default auto: derived per QPS by sim.steady's convergence check; 0 = cold)")  # fmt: skip
    add("--no-output-cache", action="store_true",
        help="engines do not cache generated tokens (default: they do, like vLLM V1)")  # fmt: skip
    add("--front", choices=FRONTS, default="round_robin",
        help="how a front tier deals requests to --routers: round_robin (default), key (hash of "
        "the business key), session (hash of the conversation)")  # fmt: skip
    add("--no-session-echo", action="store_true",
        help="multi-turn clients do not echo the session token (default: they do)")  # fmt: skip
    add("--tree-sync-ms", type=float, metavar="MS",
        help="sync prefix-history trees (preble, sglang) across routers every MS, as the SGLang "
        "model gateway's mesh does once a second (default: no sync)")  # fmt: skip
    add("--policy-param", action="append", default=[], metavar="POLICY.NAME=VALUE",
        help="a policy parameter, e.g. cacheroute_online.epsilon=0.5 (repeatable)")  # fmt: skip


def _preset_ladders() -> str:
    ladders = []
    for workload, preset in presets.PRESETS.items():
        for profile, (ladder, _) in preset.by_profile.items():
            ladders.append(f"{workload} on {profile} " + ",".join(key_of(q) for q in ladder))
        if preset.ladder is not None:
            ladders.append(f"{workload} " + ",".join(key_of(q) for q in preset.ladder))
    return "; ".join(ladders)


def add_study_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the studies (``capacity``, ``ablation``): SLOs, ladder, seeds, output."""
    add = parser.add_argument
    add("--slo", metavar="S1,S2",
        help="p99 TTFT SLOs, s (default: paper 2,3.5,5 as in Table 1; else 3.5,5)")  # fmt: skip
    add("--ladder", metavar="Q1,Q2", help="offered QPS rungs (default per workload and profile, "
        f"sim/presets.py: {_preset_ladders()})")  # fmt: skip
    add("--seeds", metavar="S1,S2",
        help="seeds (default: paper 2,3,4,5,6 as in the paper; else 1,2,3)")  # fmt: skip
    add("--ref-qps", type=float, metavar="Q", help="QPS of the p99/hit/imbalance columns "
        "(default: paper 100, or 800 on the public 70B profile; whales 300; lowshare 40; else "
        "the middle rung)")  # fmt: skip
    add("--duration", type=float, default=STEADY_DURATION_S, metavar="S",
        help="simulated arrival window per run after the pre-warm (default 150 s: 30 s warm-up + "
        "120 s measured)")  # fmt: skip
    add("--jobs", type=int, default=default_jobs(), metavar="N",
        help="worker processes (default: CPU count)")  # fmt: skip
    add(
        "--json",
        nargs="?",
        const="-",
        metavar="OUT",
        help="print the results as one JSON "
        "object (--json OUT, which writes OUT, still works but is deprecated: use --out OUT)",
    )
    add("--out", metavar="OUT", help="write the results as JSON to OUT")  # fmt: skip
    add("--plot", metavar="OUT.png", help="draw p99 TTFT vs offered QPS per policy")
