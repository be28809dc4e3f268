"""Fresh vs churn-aware replanning under the paper's rate drift (PAPER.md §5, issue 11).

**Drift model** (the paper's): each key's rate follows a lognormal random walk, σ = 0.3 per
interval: w_t = w_{t-1} · exp(σ·z), renormalised, for ``steps`` intervals after the first.

**Stream**: one continuous request stream whose per-key rates follow w_t in interval t, so
conversations (and their cached history) run on across interval boundaries. It is made by
*thinning*: the workload is generated once over the whole horizon with each key's weight at its
maximum over the intervals (g_k = max_t w_t,k), at ``qps · Σ_k g_k``; a request of key k in
interval t is kept when its thread's uniform u < w_t,k / g_k, so key k arrives at exactly
``qps · w_t,k`` and a thread is kept or dropped consistently from one interval to the next while
its key's rate is steady (the same u decides). Single-turn requests draw their own u.

**Plans**: the control plane can plan only from the past, so the plan installed at the start of
interval t+1 is built from the request counts of the ``plan_window_s`` before interval t's end
(:func:`sim.planning.estimate_rates`); the first plan from a window before interval 0. A window
longer than the interval reaches back over earlier intervals (less noise, more lag: the trade of
the control plane's ``--rate-half-life``, 60 s by default, whose decayed estimate remembers
≈ 1.44 half-lives). The fresh
replanner runs Algorithm 1 each time (:func:`controlplane.core.planner.build_plan`), the churn-aware
one :func:`controlplane.core.replanner.replan` against its own previous plan. A third arm,
``static``, keeps the first plan: its hit rate across a boundary shows what the stream alone does
there.

**Simulation**: one continuous cluster run per arm (caches carry over); at each boundary every
router's table is swapped at the first arrival past it (what a router does on a new version).
Per transition: churn (:func:`controlplane.core.churn.churn`), the hit-rate dip (token-weighted KV
hit over the ``dip_window_s`` before the boundary minus the one after), p99 TTFT of the interval's
requests (those without a first token count with their wait so far) and the plan's planned
imbalance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from controlplane.core.churn import compare
from controlplane.core.planner import PlanInput, build_plan
from controlplane.core.replanner import replan
from dataplane.core.load_view import LoadView
from dataplane.core.policies import Decision, Policy, Request
from dataplane.core.table import RoutingTable
from sim.cluster import Cluster, ClusterConfig
from sim.drift_stream import (
    GENERATORS,
    SIGMA,
    STEPS,
    DriftError,
    DriftSettings,
    drift_weights,
    drifting_stream,
)
from sim.node import Job
from sim.planning import estimate_rates
from sim.types import SimRequest
from sim.workloads.popularity import paper_active_set

# The settings and the stream live in drift_stream; they stay importable from here.
__all__ = [
    "ARMS",
    "GENERATORS",
    "SIGMA",
    "STEPS",
    "DriftError",
    "DriftSettings",
    "drift_weights",
    "drifting_stream",
    "plan_sequence",
    "run_drift",
    "summarize",
]


ARMS = ("fresh", "churn_aware", "static")


class _Switching(Policy):
    """Delegates to a policy; swaps the router's table at the first arrival past each boundary."""

    def __init__(self, inner: Policy, schedule: Sequence[tuple[float, RoutingTable]]) -> None:
        self.inner = inner
        self.schedule = list(schedule)

    def choose(self, request: Request, view: LoadView) -> Decision:
        return self.inner.choose(request, view)

    def route(self, request: Request, view: LoadView, now: float) -> Decision:
        while self.schedule and now >= self.schedule[0][0]:
            view.set_table(self.schedule.pop(0)[1])
        return self.inner.route(request, view, now)


def _plan_input(requests: Sequence[SimRequest], start: float, s: DriftSettings) -> PlanInput:
    window = [r for r in requests if start <= r.arrival_s < start + s.plan_window_s]
    hashes, rates, labels = estimate_rates(window, s.plan_window_s)
    return PlanInput(
        key_hashes=hashes, rates=rates, node_ids=[f"d{i:03d}" for i in range(s.nodes)],
        q_cap=s.q_cap, slots_per_node=s.slots_per_node, pool="sim", key_labels=labels,
    )  # fmt: skip


def plan_sequence(
    requests: Sequence[SimRequest], s: DriftSettings
) -> dict[str, list[RoutingTable]]:
    """Per arm: the plan in force in each interval 0..steps (index 0 is the first plan)."""
    offset = s.plan_window_s  # stream time of interval 0's start
    first = build_plan(_plan_input(requests, 0.0, s), created_at_unix_ms=1)
    arms = {"fresh": [first], "churn_aware": [first], "static": [first] * (s.steps + 1)}
    for t in range(s.steps):
        start = offset + (t + 1) * s.interval_s - s.plan_window_s
        plan_input = _plan_input(requests, start, s)
        arms["fresh"].append(build_plan(plan_input, created_at_unix_ms=1))
        previous = arms["churn_aware"][-1]
        arms["churn_aware"].append(
            replan(
                previous,
                plan_input,
                tolerance=s.tolerance,
                created_at_unix_ms=1,
                max_churn=s.max_churn,
            ).table
        )
    return arms


def _simulate(requests: list[SimRequest], plans: list[RoutingTable], s: DriftSettings) -> list[Job]:
    config = ClusterConfig(profile=s.profile, nodes=s.nodes, warmup_s=s.plan_window_s, seed=s.seed)
    cluster = Cluster(requests, "cacheroute", config, plans[0])
    schedule = [(s.plan_window_s + t * s.interval_s, plans[t]) for t in range(1, len(plans))]
    for router in cluster.routers:
        router.policy = _Switching(router.policy, schedule)
    cluster.run()
    return cluster.jobs


def _hit(jobs: Sequence[Job], lo: float, hi: float) -> float:
    prompt = cached = 0
    for job in jobs:
        if lo <= job.arrival < hi and job.first_token >= 0.0:
            prompt += job.prompt
            cached += job.cached
    return cached / prompt if prompt else 0.0


def _p99(jobs: Sequence[Job], lo: float, hi: float, end: float) -> float:
    waits = [
        (job.first_token if job.first_token >= 0.0 else end) - job.arrival
        for job in jobs
        if lo <= job.arrival < hi
    ]
    return float(np.percentile(waits, 99.0)) if waits else 0.0


def run_drift(workload: str, s: DriftSettings) -> dict[str, Any]:
    """The experiment of the module docstring; the document ``cachectl sim drift`` prints."""
    s.check()
    generator = GENERATORS.get(workload)
    if generator is None:
        raise DriftError(f"drift supports workloads {', '.join(GENERATORS)}; got {workload!r}")
    active = paper_active_set(s.top_k)
    weights = drift_weights(
        np.asarray(active.weights), s.sigma, s.steps, np.random.default_rng(s.seed)
    )
    requests = drifting_stream(generator, active, weights, s)
    arms = plan_sequence(requests, s)
    jobs = {arm: _simulate(requests, arms[arm], s) for arm in ARMS}
    end = s.plan_window_s + (s.steps + 1) * s.interval_s
    transitions, details = [], []
    for t in range(1, s.steps + 1):
        at = s.plan_window_s + t * s.interval_s
        row: dict[str, dict[str, float]] = {}
        extra: dict[str, dict[str, float]] = {}
        for arm in ARMS:
            before = _hit(jobs[arm], at - s.dip_window_s, at)
            after = _hit(jobs[arm], at, at + s.dip_window_s)
            p99 = _p99(jobs[arm], at, at + s.interval_s, end + 60.0)
            plan, previous = arms[arm][t], arms[arm][t - 1]
            result = compare(previous, plan)
            metrics = {
                "churn": result.churn,
                "hit_dip": before - after,
                "p99_s": p99,
                "imbalance": plan.stats.planned_imbalance,
            }
            if arm == "static":
                extra[arm] = metrics
            else:
                row[arm] = metrics
                extra[arm] = {
                    "moved_share": result.moved_share,
                    "hit_before": before,
                    "hit_after": after,
                    "admitted_keys": float(plan.num_keys),
                }
        transitions.append(row)
        details.append({"at_s": at - s.plan_window_s, **extra})
    return {
        "workload": workload,
        "transitions": transitions,
        "details": details,
        "summary": summarize(transitions, s.tolerance),
        "settings": {
            "profile": s.profile.name,
            "nodes": s.nodes,
            "qps": s.qps,
            "q_cap": s.q_cap,
            "top_k": s.top_k,
            "sigma": s.sigma,
            "steps": s.steps,
            "interval_s": s.interval_s,
            "plan_window_s": s.plan_window_s,
            "dip_window_s": s.dip_window_s,
            "slots_per_node": s.slots_per_node,
            "tolerance": s.tolerance,
            "max_churn": s.max_churn,
            "seed": s.seed,
            "requests": len(requests),
        },
    }


def summarize(
    transitions: Sequence[dict[str, dict[str, float]]], tolerance: float
) -> dict[str, Any]:
    """Means over transitions and the issue's acceptance checks."""

    def mean(arm: str, field: str) -> float:
        return float(np.mean([t[arm][field] for t in transitions]))

    worst_churn = max(t["churn_aware"]["churn"] for t in transitions)
    worst_ratio = max(t["churn_aware"]["imbalance"] / t["fresh"]["imbalance"] for t in transitions)
    return {
        "fresh": {f: mean("fresh", f) for f in ("churn", "hit_dip", "p99_s", "imbalance")},
        "churn_aware": {
            f: mean("churn_aware", f) for f in ("churn", "hit_dip", "p99_s", "imbalance")
        },
        "max_churn_aware_churn": worst_churn,
        "max_imbalance_ratio": worst_ratio,
        "checks": {
            "churn_at_most_10pct_per_interval": worst_churn <= 0.10,
            "imbalance_within_5pct_of_fresh": worst_ratio <= 1.0 + tolerance + 1e-9,
            "smaller_hit_dip_than_fresh": mean("churn_aware", "hit_dip") < mean("fresh", "hit_dip"),
        },
    }
