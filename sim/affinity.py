"""Delivered affinity of a simulated run, in the numbers peers report routers by (issue 31).

Over the measured requests that are a conversation thread's later turns (*follow-ups*; a thread's
first request in the run is its turn 1):

* **follow-up cached fraction**: cached prompt tokens ÷ prompt tokens of the follow-ups served;
* **follow-ups on the turn-1 node**: the share served by the node that served the thread's turn 1;
* **reusable vs delivered cached tokens**: *reusable* is what a follow-up would find cached on
  its previous turn's node with that turn's prompt and answer still held (the leading 16-token
  blocks it shares with them), *delivered* what the engine model found (it can be more: other
  threads of the same key leave their blocks too);
* **fleet load CoV**: standard deviation ÷ mean of the measured requests each node received
  (:func:`dataplane.core.dispersion.load_cov`).

:func:`run_with_affinity` runs one policy as :func:`sim.study.run_task` does (same stream, plan
and pre-warm) but keeps the cluster, whose jobs these are computed from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from dataplane.core.dispersion import load_cov
from sim.cluster import Cluster, ClusterConfig
from sim.node import Job
from sim.planning import make_stream, placement_of, plan_for
from sim.run_results import RunMetrics
from sim.study import RunSettings, prewarm_for, sim_policy_params
from sim.types import SimRequest, Workload


@dataclass(frozen=True)
class Affinity:
    followups: int
    followup_cached_fraction: float
    followups_on_first_node: float
    reusable_tokens: int
    delivered_tokens: int
    load_cov: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def affinity_line(a: Affinity) -> str:
    """The four numbers on one line (``cachectl sim run --affinity``)."""
    return (
        f"delivered affinity: {a.followups} follow-ups, cached fraction "
        f"{100 * a.followup_cached_fraction:.1f}%, on the turn-1 node "
        f"{100 * a.followups_on_first_node:.1f}%, cached tokens {a.delivered_tokens:,} delivered "
        f"vs {a.reusable_tokens:,} reusable from the previous turn, load CoV {a.load_cov:.3f}"
    )


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Turn:
    """One request as the numbers need it (a simulated job, or a load generator's outcome)."""

    thread: int  # -1: single-turn
    node: str
    measured: bool  # past the warm-up
    served: bool  # got its first token
    prompt: int
    cached: int
    blocks: tuple[int, ...]
    output_blocks: tuple[int, ...] = ()


def measure_turns(
    turns: Iterable[Turn], per_node: Sequence[float], *, block_tokens: int
) -> Affinity:
    """The module docstring's numbers over turns in arrival order; ``per_node`` the measured
    requests each node received (for the load CoV)."""
    first: dict[int, str] = {}
    previous: dict[int, tuple[int, ...]] = {}
    followups = same = prompt = cached = reusable = 0
    for turn in turns:
        thread = turn.thread
        if thread < 0:
            continue
        if thread not in first:
            first[thread] = turn.node
        elif turn.measured and turn.served:
            followups += 1
            same += turn.node == first[thread]
            prompt += turn.prompt
            cached += turn.cached
            reusable += min(turn.prompt, _shared(previous[thread], turn.blocks) * block_tokens)
        previous[thread] = turn.blocks + turn.output_blocks
    return Affinity(
        followups=followups,
        followup_cached_fraction=cached / prompt if prompt else 0.0,
        followups_on_first_node=same / followups if followups else 0.0,
        reusable_tokens=reusable,
        delivered_tokens=cached,
        load_cov=load_cov([float(n) for n in per_node]),
    )


def measure(
    requests: Sequence[SimRequest],
    jobs: Sequence[Job],
    routed: Sequence[int],
    *,
    warmup_s: float,
    block_tokens: int,
) -> Affinity:
    """:func:`measure_turns` over a finished run's jobs (in arrival order)."""
    turns = (
        Turn(
            requests[job.rid].thread,
            str(job.node),
            job.arrival >= warmup_s,
            job.first_token >= 0.0,
            job.prompt,
            job.cached,
            job.blocks,
            job.output_blocks,
        )
        for job in jobs
    )
    return measure_turns(turns, [float(n) for n in routed], block_tokens=block_tokens)


def run_with_affinity(
    workload: Workload, policy: str, settings: RunSettings, *, qps: float, seed: int
) -> tuple[RunMetrics, Affinity]:
    """One policy at one QPS (as :func:`sim.study.run_task`), with its delivered affinity."""
    protocol = settings.protocol(prewarm_for(workload, settings, qps))
    placement = placement_of(policy)
    needs_window = protocol.prewarm_s > 0 or placement is not None
    stream = make_stream(
        workload, qps=qps, duration_s=settings.duration_s, seed=seed,
        prior_window_s=settings.plan_window_s if needs_window else 0.0,
        prewarm_s=protocol.prewarm_s,
    )  # fmt: skip
    params = {
        **sim_policy_params(policy, settings.profile),
        **settings.policy_params.get(policy, {}),
    }
    config = ClusterConfig(
        profile=settings.profile, nodes=settings.nodes, routers=settings.routers,
        snapshot_interval_s=settings.snapshot_interval_s, warmup_s=settings.warmup_s,
        timeout_s=settings.timeout_s, abort_above_s=settings.abort_above_s, seed=seed,
        cache_outputs=settings.cache_outputs, front=settings.front,
        echo_tokens=settings.echo_tokens, tree_sync_s=settings.tree_sync_s,
    )  # fmt: skip
    table = plan_for(
        placement, stream, config.node_ids(), q_cap=settings.q_cap,
        slots_per_node=settings.slots_per_node, seed=seed,
    )  # fmt: skip
    cluster = Cluster(
        stream.requests, policy, replace(config, policy_params=params), table, stream.prewarm
    )
    metrics = cluster.run()
    affinity = measure(
        cluster.requests, cluster.jobs, cluster.routed,
        warmup_s=settings.warmup_s, block_tokens=settings.profile.block_tokens,
    )  # fmt: skip
    return metrics, affinity
