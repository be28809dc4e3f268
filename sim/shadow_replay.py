"""The shadow-replay gate (PAPER.md §5): replay a recorded stream with a candidate plan and with
Flat-LB, at one load below and one near the knee, and decide whether the plan may be enabled.

**Loads.** A recorded stream is replayed at another load by scaling its arrival times (the same
requests, in the same order, closer together or further apart). The *knee* is Flat-LB's SLO
capacity on this stream, searched as :func:`sim.calibration.single_destination_knee` does: from
the recorded load, double until a probe misses the SLO (p99 TTFT ≤ ``slo_s`` and ≤ 5% failures,
:class:`sim.capacity.Rung`), then bisect ``iterations`` times. The gate's two loads are
``below`` = ``below_fraction`` × the knee and ``near`` = the knee. The candidate's capacity is
searched the same way.

**Long streams.** A stream longer than ``max_requests`` is *thinned evenly*: request
``floor(i · n / max_requests)`` of the n in arrival order is kept, for i < ``max_requests``, so the
replay covers the whole window (its key mix and how it drifts, compressed in time) rather than
its first minutes. Loads stay absolute: a probe at q QPS scales the thinned stream's arrivals to
q. The report states it (``replayed``: kept, of, factor) and ``recorded_qps`` is the whole
stream's rate, where the knee search starts.

**Noise and the test.** Each load is replayed with ``seeds`` policy/cluster seeds (the stream is
fixed; the seeds change the random choices of power-of-two routing, the thing that varies between
replays). The replay's noise is the spread of p99 over those seeds. The gate **passes** when

* p99 improves beyond noise at either load: the 95% Welch interval of mean p99 (Flat-LB minus
  candidate, t quantile at df = 2·seeds − 2, a conservative choice) lies above 0; or
* capacity improves beyond noise: at Flat-LB's first failing load of its knee search the
  candidate meets the SLO in every seed and Flat-LB misses it in every seed;

and p99 does not *regress* beyond noise at either load (the same interval lying below 0).
Otherwise it **fails**, with the reason. A higher hit rate alone never passes.

**The candidate's policy.** The plan is replayed as the routers will follow it:
``ShadowSettings.policy``, the paper's ``cacheroute`` by default or ``cacheroute_online`` (the
control plane's ``--shadow-policy``, ``cachectl sim shadow --policy``). The report names it
(``candidate_policy``); its keys stay ``cacheroute`` (the plan's side) and ``flat``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataplane.core.table import RoutingTable, make_table
from sim.capacity import Rung, t_quantile_975
from sim.cluster import ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.run_results import RunMetrics
from sim.types import SimRequest

CANDIDATE, BASELINE = "cacheroute", "flat"  # the two sides' names in the report
# The LPT-plan policies a candidate can be replayed with (ShadowSettings.policy): the paper's
# dispatch, its online step, conversation affinity with one bound or two
# (docs/components/policies.md).
PLAN_POLICIES = (
    "cacheroute",
    "cacheroute_online",
    "cacheroute_conversation",
    "cacheroute_balanced",
)


class ShadowError(ValueError):
    """A replay that cannot be run (empty stream, bad setting)."""


@dataclass(frozen=True)
class ShadowSettings:
    profile: EngineProfile
    nodes: int | None = None  # default: the plan's destinations
    slo_s: float = 3.5
    seeds: int = 3
    below_fraction: float = 0.5
    iterations: int = 4
    max_requests: int = 20_000  # longest replay; a longer stream is thinned evenly
    timeout_s: float = 30.0
    policy: str = CANDIDATE  # how the routers follow the plan (PLAN_POLICIES), as they will


@dataclass(frozen=True)
class LoadResult:
    qps: float
    metrics: dict[str, list[RunMetrics]]  # policy -> one per seed

    def mean(self, policy: str, field_name: str) -> float:
        return float(np.mean([getattr(m, field_name) for m in self.metrics[policy]]))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    knee_qps: float
    candidate_knee_qps: float
    recorded_qps: float
    loads: dict[str, LoadResult] = field(default_factory=dict)
    tests: dict[str, Any] = field(default_factory=dict)
    replayed: int = 0
    recorded: int = 0
    policy: str = CANDIDATE  # the candidate side's routing policy


def scaled(requests: Sequence[SimRequest], factor: float) -> list[SimRequest]:
    """The stream with arrival times divided by ``factor`` (factor 2 = twice the load)."""
    return [r.at(r.arrival_s / factor) for r in requests]


def thinned(ordered: Sequence[SimRequest], most: int) -> list[SimRequest]:
    """At most ``most`` requests spread evenly over the whole stream (module docstring)."""
    n = len(ordered)
    if n <= most:
        return list(ordered)
    return [ordered[i * n // most] for i in range(most)]


def sim_table(table: RoutingTable, ids: Sequence[str]) -> RoutingTable:
    """The plan with its destinations renamed to the simulator's ``ids`` (same order)."""
    if len(ids) < len(table.node_ids):
        raise ShadowError(f"the plan has {len(table.node_ids)} destinations, the pool {len(ids)}")
    return make_table(
        pool=table.pool, node_ids=ids[: len(table.node_ids)], key_hashes=table.key_hashes,
        set_offsets=table.set_offsets, set_members=table.set_members, params=table.params,
        created_at_unix_ms=table.created_at_unix_ms, stats=table.stats, top_keys=table.top_keys,
    )  # fmt: skip


class Replayer:
    """Runs one policy on the stream at a load; counts runs for the report."""

    def __init__(self, requests: Sequence[SimRequest], table: RoutingTable, s: ShadowSettings):
        if len(requests) < 100:
            raise ShadowError(f"{len(requests)} requests: a replay needs at least 100")
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        self.recorded = n = len(ordered)
        span = ordered[-1].arrival_s - ordered[0].arrival_s
        self.recorded_qps = n / span if span > 0 else float(n)
        kept = thinned(ordered, s.max_requests)
        start = kept[0].arrival_s
        self.requests = [r.at(r.arrival_s - start) for r in kept]
        kept_span = self.requests[-1].arrival_s
        self.replay_qps = len(kept) / kept_span if kept_span > 0 else float(len(kept))
        self.nodes = s.nodes or len(table.node_ids)
        ids = ClusterConfig(profile=s.profile, nodes=self.nodes).node_ids()
        self.table = sim_table(table, ids)
        self.settings = s
        self.runs = 0

    def stream_at(self, qps: float) -> list[SimRequest]:
        """The replayed (maybe thinned) requests with arrivals scaled to ``qps``."""
        return scaled(self.requests, qps / self.replay_qps)

    def run(self, policy: str, qps: float, seed: int, *, abort: bool) -> RunMetrics:
        s = self.settings
        stream = self.stream_at(qps)
        config = ClusterConfig(
            profile=s.profile, nodes=self.nodes, warmup_s=stream[-1].arrival_s / 5,
            timeout_s=s.timeout_s, abort_above_s=s.slo_s if abort else None, seed=seed,
        )  # fmt: skip
        self.runs += 1
        if policy == CANDIDATE:  # the plan, routed by the policy the routers run
            return simulate(stream, s.policy, config, self.table)
        return simulate(stream, policy, config, None)

    def passes(self, policy: str, qps: float, seed: int = 1) -> bool:
        m = self.run(policy, qps, seed, abort=True)
        return Rung(qps, m.ttft_p99_s, m.failures, m.aborted).passes(self.settings.slo_s)

    def knee(self, policy: str) -> tuple[float, float]:
        """(highest passing load, lowest failing load) of the search in the module docstring."""
        low, high = 0.0, self.recorded_qps
        while self.passes(policy, high):
            low, high = high, high * 2
            if high > 64 * self.recorded_qps:
                return low, math.inf
        for _ in range(self.settings.iterations):
            middle = (low + high) / 2
            if self.passes(policy, middle):
                low = middle
            else:
                high = middle
        return low, high


def welch(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[float, float]:
    """Mean difference (baseline − candidate) and its 95% half-width (df = n_b + n_c − 2)."""
    nb, nc = len(baseline), len(candidate)
    diff = float(np.mean(baseline) - np.mean(candidate))
    if nb < 2 or nc < 2:
        return diff, math.inf
    var = np.var(baseline, ddof=1) / nb + np.var(candidate, ddof=1) / nc
    return diff, t_quantile_975(nb + nc - 2) * math.sqrt(float(var))


def shadow(
    requests: Sequence[SimRequest],
    table: RoutingTable,
    s: ShadowSettings,
    progress: Callable[[str], None] | None = None,
) -> Verdict:
    """Replay and decide (the module docstring is the specification)."""
    if s.seeds < 2 or not 0 < s.below_fraction < 1 or s.iterations < 1 or not s.slo_s > 0:
        raise ShadowError("seeds >= 2, 0 < below_fraction < 1, iterations >= 1, slo_s > 0")
    if s.policy not in PLAN_POLICIES:
        known = ", ".join(PLAN_POLICIES)
        raise ShadowError(f"policy {s.policy!r}: a plan is followed by one of {known}")
    replayer = Replayer(requests, table, s)
    note = progress or (lambda _: None)
    knee, first_fail = replayer.knee(BASELINE)
    note(f"Flat-LB knee {knee:.1f} QPS (first failure {first_fail:.1f})")
    cand_knee, _ = replayer.knee(CANDIDATE)
    note(f"candidate knee {cand_knee:.1f} QPS")
    if knee == 0.0:
        knee = first_fail * s.below_fraction  # Flat-LB misses even the recorded load
    seeds = list(range(1, s.seeds + 1))
    loads: dict[str, LoadResult] = {}
    tests: dict[str, Any] = {"seeds": s.seeds, "slo_s": s.slo_s}
    improved, regressed = [], []
    for name, qps in (("below", s.below_fraction * knee), ("near", knee)):
        runs = {p: [replayer.run(p, qps, seed, abort=False) for seed in seeds]
                for p in (BASELINE, CANDIDATE)}  # fmt: skip
        loads[name] = LoadResult(qps, runs)
        diff, half = welch(
            [m.ttft_p99_s for m in runs[BASELINE]], [m.ttft_p99_s for m in runs[CANDIDATE]]
        )
        tests[f"p99_{name}"] = {"diff_s": diff, "half_width_s": half}
        if diff - half > 0:
            improved.append(f"p99 at {name} ({qps:.1f} QPS) by {diff:.3f} s ± {half:.3f}")
        if diff + half < 0:
            regressed.append(f"p99 at {name} ({qps:.1f} QPS) worse by {-diff:.3f} s ± {half:.3f}")
        note(f"{name}: {qps:.1f} QPS, p99 diff {diff:+.3f} ± {half:.3f} s")
    capacity_ok = False
    if math.isfinite(first_fail):
        cand_pass = all(replayer.passes(CANDIDATE, first_fail, seed) for seed in seeds)
        base_fail = not any(replayer.passes(BASELINE, first_fail, seed) for seed in seeds)
        capacity_ok = cand_pass and base_fail
        tests["capacity"] = {"at_qps": first_fail, "candidate_passes_all": cand_pass,
                             "baseline_fails_all": base_fail}  # fmt: skip
        if capacity_ok:
            improved.append(f"capacity: meets the SLO at {first_fail:.1f} QPS, where Flat-LB fails")
    tests["runs"] = replayer.runs
    if regressed:
        reason = "regresses beyond noise: " + "; ".join(regressed)
    elif improved:
        reason = "improves beyond noise: " + "; ".join(improved)
    else:
        reason = (
            "no improvement beyond the replay's noise in p99 at either load or in capacity "
            f"(Flat-LB knee {knee:.1f} QPS, candidate {cand_knee:.1f})"
        )
    return Verdict(
        passed=bool(improved) and not regressed, reason=reason, knee_qps=knee,
        candidate_knee_qps=cand_knee, recorded_qps=replayer.recorded_qps, loads=loads,
        tests=tests, replayed=len(replayer.requests), recorded=replayer.recorded,
        policy=s.policy,
    )  # fmt: skip


def report(verdict: Verdict) -> dict[str, Any]:
    """The JSON document ``sim shadow`` and ``plan shadow`` print."""
    loads: dict[str, Any] = {}
    for name, load in verdict.loads.items():
        loads[name] = {"qps": load.qps}
        for policy in (CANDIDATE, BASELINE):
            loads[name][policy] = {
                "kv_hit": load.mean(policy, "kv_hit"),
                "imbalance": load.mean(policy, "imbalance"),
                "p99_s": load.mean(policy, "ttft_p99_s"),
                "p99_s_per_seed": [m.ttft_p99_s for m in load.metrics[policy]],
                "failures": load.mean(policy, "failures"),
            }
    return {
        "verdict": "pass" if verdict.passed else "fail",
        "reason": verdict.reason,
        "recorded_qps": verdict.recorded_qps,
        "replayed": {
            "requests": verdict.replayed,
            "of": verdict.recorded,
            "thinning": verdict.recorded / verdict.replayed if verdict.replayed else 1.0,
        },
        "candidate_policy": verdict.policy,
        "capacity_qps": {CANDIDATE: verdict.candidate_knee_qps, BASELINE: verdict.knee_qps},
        "loads": loads,
        "tests": verdict.tests,
    }
