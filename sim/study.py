"""Runs of policies over load ladders and seeds, spread over worker processes.

One *task* is a (seed, QPS) pair: it generates that stream once (plan window + run), builds each
placement's table once, and simulates every policy on the same requests, so policies are compared
on identical traffic. Tasks run in a ``fork`` pool (the workload object is inherited, not
pickled), highest QPS first: those take longest unless they abort, so the pool's tail is short.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dataplane.core.table import RoutingTable
from sim.cluster import DEFAULT_SNAPSHOT_S, DEFAULT_TIMEOUT_S, ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.planning import (
    DEFAULT_PLAN_WINDOW_S,
    DEFAULT_SLOTS_PER_NODE,
    Stream,
    make_stream,
    placement_of,
    plan_for,
)
from sim.run_results import RunMetrics
from sim.steady import Convergence, Protocol, cached_prewarm, remember
from sim.types import Workload

DEFAULT_DURATION_S = 75.0
DEFAULT_WARMUP_S = 15.0
# Steady-state protocol (the command-line default): the pre-warm window derived by the
# convergence check (sim.steady), then 30 s simulated warm-up and 120 s measured.
STEADY_DURATION_S = 150.0
STEADY_WARMUP_S = 30.0


@dataclass(frozen=True)
class RunSettings:
    """Everything about a run except the workload, the policy, the QPS and the seed."""

    profile: EngineProfile
    q_cap: float
    nodes: int = 30
    routers: int = 1
    duration_s: float = DEFAULT_DURATION_S
    warmup_s: float = DEFAULT_WARMUP_S
    plan_window_s: float = DEFAULT_PLAN_WINDOW_S
    slots_per_node: int = DEFAULT_SLOTS_PER_NODE
    snapshot_interval_s: float = DEFAULT_SNAPSHOT_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    abort_above_s: float | None = None
    policy_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    prewarm_s: float | None = 0.0  # replayed before the run; None: derived (sim.steady)
    cache_outputs: bool = True  # generated-token caching in the engines
    front: str = "round_robin"  # front tier: how requests reach routers (sim.cluster)
    echo_tokens: bool = True  # multi-turn clients echo session tokens (sim.cluster)
    tree_sync_s: float | None = None  # prefix-history trees synced across routers (sim.tree_sync)

    def protocol(self, prewarm: Convergence | float) -> Protocol:
        """The run protocol at one rung, given its pre-warm (a number or a convergence check)."""
        if isinstance(prewarm, Convergence):
            return Protocol(
                prewarm.prewarm_s, self.warmup_s, self.duration_s - self.warmup_s,
                self.plan_window_s, prewarm.warm_at_s, prewarm.converged,
            )  # fmt: skip
        return Protocol(prewarm, self.warmup_s, self.duration_s - self.warmup_s, self.plan_window_s)


@dataclass(frozen=True)
class RunRecord:
    policy: str
    seed: int
    qps: float
    metrics: RunMetrics
    wall_s: float
    protocol: Protocol | None = None


def sim_policy_params(policy: str, profile: EngineProfile) -> dict[str, Any]:
    """Parameters the simulator passes to a policy so it mirrors the simulated engines.

    Preble mirrors what the engines cache, so its per-node history cap is the profile's KV
    capacity; every other policy keeps its documented defaults.
    """
    if policy == "preble":
        return {"max_blocks_per_node": profile.kv_blocks}
    return {}


def run_policies(
    stream: Stream,
    policies: Sequence[str],
    settings: RunSettings,
    *,
    qps: float,
    seed: int,
    protocol: Protocol | None = None,
) -> list[RunRecord]:
    """Simulate each policy on the same stream; tables are built once per placement."""
    config_base = ClusterConfig(
        profile=settings.profile,
        nodes=settings.nodes,
        routers=settings.routers,
        snapshot_interval_s=settings.snapshot_interval_s,
        warmup_s=settings.warmup_s,
        timeout_s=settings.timeout_s,
        abort_above_s=settings.abort_above_s,
        seed=seed,
        cache_outputs=settings.cache_outputs,
        front=settings.front,
        echo_tokens=settings.echo_tokens,
        tree_sync_s=settings.tree_sync_s,
    )
    node_ids = config_base.node_ids()
    tables: dict[str | None, RoutingTable | None] = {}
    records = []
    for policy in policies:
        started = time.perf_counter()
        placement = placement_of(policy)
        if placement not in tables:
            tables[placement] = plan_for(
                placement,
                stream,
                node_ids,
                q_cap=settings.q_cap,
                slots_per_node=settings.slots_per_node,
                seed=seed,
            )
        params = sim_policy_params(policy, settings.profile)
        params.update(settings.policy_params.get(policy, {}))
        config = replace(config_base, policy_params=params)
        metrics = simulate(stream.requests, policy, config, tables[placement], stream.prewarm)
        wall = time.perf_counter() - started
        records.append(RunRecord(policy, seed, qps, metrics, wall, protocol))
    return records


def run_single(
    workload: Workload, policy: str, settings: RunSettings, *, qps: float, seed: int
) -> RunRecord:
    return run_task(workload, [policy], settings, qps=qps, seed=seed)[0]


def run_task(
    workload: Workload, policies: Sequence[str], settings: RunSettings, *, qps: float, seed: int
) -> list[RunRecord]:
    """One (seed, QPS): generate the stream once, run every policy on it."""
    prewarm = prewarm_for(workload, settings, qps)
    protocol = settings.protocol(prewarm)
    # The plan window exists for table policies only: without one (and without a pre-warm) the
    # run replays the stream from its first request, so a finite trace loses nothing.
    needs_window = protocol.prewarm_s > 0 or any(placement_of(p) is not None for p in policies)
    stream = make_stream(
        workload,
        qps=qps,
        duration_s=settings.duration_s,
        seed=seed,
        prior_window_s=settings.plan_window_s if needs_window else 0.0,
        prewarm_s=protocol.prewarm_s,
    )
    return run_policies(stream, policies, settings, qps=qps, seed=seed, protocol=protocol)


def prewarm_for(workload: Workload, settings: RunSettings, qps: float) -> Convergence | float:
    """The settings' fixed pre-warm, or the convergence check's at this QPS (memoised)."""
    if settings.prewarm_s is not None:
        return settings.prewarm_s
    return cached_prewarm(
        workload,
        qps=qps,
        nodes=settings.nodes,
        kv_blocks=settings.profile.kv_blocks,
        cache_outputs=settings.cache_outputs,
    )


# -- the pool -------------------------------------------------------------------------------------

_STATE: tuple[Workload, Sequence[str], RunSettings] | None = None


def _check(qps: float) -> tuple[float, Convergence | float]:
    assert _STATE is not None, "worker started without a study"
    workload, _, settings = _STATE
    return qps, prewarm_for(workload, settings, qps)


def _task(job: tuple[int, float]) -> list[RunRecord]:
    assert _STATE is not None, "worker started without a study"
    workload, policies, settings = _STATE
    seed, qps = job
    return run_task(workload, policies, settings, qps=qps, seed=seed)


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def run_study(
    workload: Workload,
    policies: Sequence[str],
    settings: RunSettings,
    *,
    ladder: Sequence[float],
    seeds: Sequence[int],
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[RunRecord]:
    """Every policy at every (seed, QPS); ``jobs`` worker processes (1 = in this process)."""
    global _STATE  # noqa: PLW0603 -- handed to forked workers without pickling
    tasks = sorted(((s, float(q)) for s in seeds for q in ladder), key=lambda t: (-t[1], t[0]))
    _STATE = (workload, tuple(policies), settings)
    records: list[RunRecord] = []
    try:
        if settings.prewarm_s is None and jobs > 1 and len(ladder) > 1:
            # The convergence checks first, in parallel; forked task workers inherit them.
            context = multiprocessing.get_context("fork")
            rungs = sorted({float(q) for q in ladder}, reverse=True)
            with context.Pool(processes=min(jobs, len(rungs))) as pool:
                for qps, result in pool.imap_unordered(_check, rungs):
                    if isinstance(result, Convergence):
                        remember(
                            workload, qps, settings.nodes, settings.profile.kv_blocks,
                            settings.cache_outputs, result,
                        )  # fmt: skip
        if jobs <= 1 or len(tasks) <= 1:
            for done, task in enumerate(tasks, 1):
                records.extend(_task(task))
                if progress:
                    progress(done, len(tasks))
        else:
            context = multiprocessing.get_context("fork")
            with context.Pool(processes=min(jobs, len(tasks))) as pool:
                for done, batch in enumerate(pool.imap_unordered(_task, tasks), 1):
                    records.extend(batch)
                    if progress:
                        progress(done, len(tasks))
    finally:
        _STATE = None
    records.sort(key=lambda r: (policies.index(r.policy), r.seed, r.qps))
    return records
