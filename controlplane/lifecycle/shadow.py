"""ShadowPlan: replay a recorded stream with a stored plan and with Flat-LB, store the verdict.

The stream is the routers' sampled trace (``cr:{pool}:trace``) of the last ``recent_minutes``, or a
trace file the simulator reads (a path on this host). A sampled request carries its key and the
router's prompt blocks (at most the first 4,096 bytes, 64-byte chunks ≈ 16 tokens each), not
its sizes: its prompt is taken as 16 tokens per block and its answer as ``OUTPUT_TOKENS`` (the
paper workload's median answer). The replay (:func:`sim.shadow_replay.shadow`) runs in a worker
thread on the pool's engine profile and node count; it never touches live traffic. The verdict,
with the full report as JSON, is written into the plan's metadata (``PlanMetadata.verdict``) and
audited as ``shadow`` with the actor; ``plan show``, ``plan list`` and ``status`` read it there.

**Too few samples.** A replay of a handful of requests decides nothing: with fewer than
``min_samples`` (``--shadow-min-samples``, default 300) sampled requests in the window the
verdict is ``inconclusive``, recorded without a replay, and the shadow gate treats it by the
operator's ``--shadow-inconclusive`` rule (:mod:`controlplane.lifecycle.verdict_gate`). A small
pool reaches the minimum because the routers' sampling rate rises when traffic is thin
(``--sample-floor``, :mod:`dataplane.telemetry.sampler`). A trace file has no minimum (the operator
chose its length). The verdict records the profile that judged it and the number of requests.

**Which profile.** The one the request names (``--profile``); without one, the pool's fleet
profile fitted from its own telemetry (``cachectl profile fit``) when its fit quality is within
the documented bound; else the built-in 70B testbed. The verdict's ``profile`` names it
(``fitted:<pool>@<time>`` for a fitted one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2
from cacheroute_state import Stores
from controlplane.errors import InvalidArgumentError, PreconditionError
from controlplane.lifecycle.fitted_profile import gate_profile
from controlplane.lifecycle.plans import read_plan
from dataplane.core.table_codec import decode_table
from sim.engine_model import LLAMA_70B, EngineProfile, UnknownProfileError, get_profile
from sim.shadow_replay import CANDIDATE, ShadowError, ShadowSettings, report, shadow
from sim.types import BLOCK_TOKENS, SimRequest
from sim.workloads.registry import make_workload

DEFAULT_RECENT_MINUTES = 10
MAX_SAMPLES = 100_000  # the trace stream keeps about this many
OUTPUT_TOKENS = 129
DEFAULT_TRACE_QPS = 100.0
DEFAULT_TRACE_DURATION_S = 600.0
# A request's own knobs are bounded (5M nodes took 2.3 GiB and a MemoryError): a pool this large
# is far past any deployment, a replay this long far past any budget.
MAX_NODES = 4096
MAX_TRACE_QPS = 10_000.0
MAX_TRACE_DURATION_S = 24 * 3600.0
MAX_RECENT_MINUTES = 24 * 60
Outcome = table_pb2.ShadowVerdict.Outcome


@dataclass(frozen=True)
class ShadowBudget:
    """How much a replay may cost (``--shadow-*``): a small local cluster decides in seconds
    with a few thousand requests, one seed and no bisection; the defaults are the gate's own."""

    max_requests: int = 20_000
    seeds: int = 3
    iterations: int = 4
    recent_minutes: int = DEFAULT_RECENT_MINUTES
    min_samples: int = 300
    policy: str = CANDIDATE  # the routers' policy (sim.shadow_replay.PLAN_POLICIES)


def check_request_bounds(request: admin_pb2.ShadowPlanRequest) -> None:
    """ValueError (INVALID_ARGUMENT) naming a field over its bound."""
    for name, value, bound in (
        ("nodes", request.nodes, MAX_NODES),
        ("trace_qps", request.trace_qps, MAX_TRACE_QPS),
        ("trace_duration_s", request.trace_duration_s, MAX_TRACE_DURATION_S),
        ("recent_minutes", request.recent_minutes, MAX_RECENT_MINUTES),
    ):
        if not 0 <= value <= bound:  # also refuses NaN
            raise InvalidArgumentError(f"{name} must be in [0, {bound:g}], got {value!r}")


def samples_to_requests(
    samples: Sequence[cluster_pb2.SampledRequest], since_ms: int
) -> list[SimRequest]:
    """Sampled requests at or after ``since_ms`` as simulator requests, times from the first."""
    kept = sorted((s for s in samples if s.at_unix_ms >= since_ms), key=lambda s: s.at_unix_ms)
    if not kept:
        return []
    start = kept[0].at_unix_ms
    return [
        SimRequest(
            arrival_s=(s.at_unix_ms - start) / 1000.0,
            key=s.key,
            key_hash=s.key_hash,
            blocks=tuple(s.prefix_blocks),
            prompt_tokens=max(1, len(s.prefix_blocks)) * BLOCK_TOKENS,
            output_tokens=OUTPUT_TOKENS,
        )
        for s in kept
    ]


async def load_stream(
    stores: Stores,
    pool: str,
    request: admin_pb2.ShadowPlanRequest,
    now_ms: int,
    default_minutes: int = DEFAULT_RECENT_MINUTES,
) -> tuple[list[SimRequest], str]:
    """The requests to replay and a description of where they came from."""
    if request.trace_path:
        qps = request.trace_qps or DEFAULT_TRACE_QPS
        duration = request.trace_duration_s or DEFAULT_TRACE_DURATION_S
        try:
            workload = make_workload("trace", path=request.trace_path)
            requests = await asyncio.to_thread(
                workload.requests, qps=qps, duration_s=duration, seed=0
            )
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"trace_path {request.trace_path}: {exc}") from None
        return requests, f"trace file {request.trace_path} at {qps:g} QPS for {duration:g} s"
    minutes = request.recent_minutes or default_minutes
    samples = await stores.telemetry.read_samples(pool, MAX_SAMPLES)
    requests = samples_to_requests(samples, now_ms - minutes * 60_000)
    if not requests:
        raise PreconditionError(
            f"pool {pool} has no sampled requests in the last {minutes} minutes (routers sample "
            "with --sample-rate, raised on thin traffic by --sample-floor); replay a trace file "
            "instead (cachectl plan shadow --trace FILE)"
        )
    return requests, f"{len(requests)} sampled requests of the last {minutes} minutes"


async def judging_profile(stores: Stores, pool: str, named: str) -> EngineProfile:
    """The profile a replay runs on: the one named, else the pool's fitted fleet profile when
    its fit is within the bound (:mod:`controlplane.lifecycle.fleet_profile`), else the
    built-in 70B testbed."""
    if not named:
        fitted = await gate_profile(stores, pool)
        if fitted is not None:
            return fitted
    try:
        return get_profile(named or LLAMA_70B.name)
    except UnknownProfileError as exc:
        raise InvalidArgumentError(f"profile: {exc}") from None


def inconclusive(
    samples: int, minimum: int, *, actor: str, source: str, profile: str, now_ms: int
) -> table_pb2.ShadowVerdict:
    """The verdict of a window with too few samples to judge (module docstring)."""
    return table_pb2.ShadowVerdict(
        outcome=Outcome.OUTCOME_INCONCLUSIVE,
        summary=(
            f"{samples} sampled requests, fewer than the {minimum} a replay judges on "
            "(--shadow-min-samples); wait for more traffic, raise the routers' --sample-floor, "
            "or replay a trace file (--trace FILE)"
        ),
        decided_at_unix_ms=now_ms,
        decided_by=actor,
        source=source,
        profile=profile,
        samples=samples,
    )


def verdict_proto(
    document: dict[str, object], *, actor: str, source: str, now_ms: int
) -> table_pb2.ShadowVerdict:
    loads = document["loads"]
    assert isinstance(loads, dict)
    capacity = document["capacity_qps"]
    assert isinstance(capacity, dict)
    sides: dict[str, dict[str, float]] = {"cacheroute": {}, "flat": {}}
    for name, load in loads.items():
        for policy, side in sides.items():
            for metric in ("kv_hit", "imbalance", "p99_s", "failures"):
                side[f"{name}_{metric}"] = float(load[policy][metric])
            side[f"{name}_qps"] = float(load["qps"])
    for policy, side in sides.items():
        side["capacity_qps"] = float(capacity[policy])
    return table_pb2.ShadowVerdict(
        outcome=Outcome.OUTCOME_PASS if document["verdict"] == "pass" else Outcome.OUTCOME_FAIL,
        summary=str(document["reason"]),
        decided_at_unix_ms=now_ms,
        candidate=sides["cacheroute"],
        baseline=sides["flat"],
        decided_by=actor,
        source=source,
        report_json=json.dumps(document, sort_keys=True),
    )


async def shadow_plan(
    stores: Stores,
    request: admin_pb2.ShadowPlanRequest,
    *,
    actor: str,
    now_ms: int,
    budget: ShadowBudget | None = None,
) -> table_pb2.ShadowVerdict:
    """Replay, decide, record the verdict on the plan version, audit it."""
    check_request_bounds(request)
    pool = request.pool or "default"
    meta, data = await read_plan(stores, pool, request.version)
    profile = await judging_profile(stores, meta.pool, request.profile)
    table = await asyncio.to_thread(decode_table, data, verify_hash=False)
    budget = budget or ShadowBudget()
    requests, source = await load_stream(stores, meta.pool, request, now_ms, budget.recent_minutes)
    if not request.trace_path and len(requests) < budget.min_samples:
        proto = inconclusive(
            len(requests), budget.min_samples, actor=actor, source=source,
            profile=profile.name, now_ms=now_ms,
        )  # fmt: skip
        return await _record(stores, meta, proto, actor=actor, now_ms=now_ms)
    settings = ShadowSettings(
        profile=profile,
        nodes=request.nodes or None,
        max_requests=budget.max_requests,
        seeds=budget.seeds,
        iterations=budget.iterations,
        policy=budget.policy,
    )
    try:
        verdict = await asyncio.to_thread(shadow, requests, table, settings)
    except ShadowError as exc:
        raise PreconditionError(f"cannot replay plan {meta.version}: {exc}") from None
    document = report(verdict)
    document["profile"] = profile.name
    proto = verdict_proto(document, actor=actor, source=source, now_ms=now_ms)
    proto.profile = profile.name
    proto.samples = len(requests)
    return await _record(stores, meta, proto, actor=actor, now_ms=now_ms)


async def _record(
    stores: Stores,
    meta: table_pb2.PlanMetadata,
    proto: table_pb2.ShadowVerdict,
    *,
    actor: str,
    now_ms: int,
) -> table_pb2.ShadowVerdict:
    """Write the verdict into the plan's metadata and audit it as ``shadow``."""
    meta.verdict.CopyFrom(proto)
    await stores.plans.update_metadata(meta)
    word = Outcome.Name(proto.outcome).removeprefix("OUTCOME_").lower()
    await stores.plans.append_audit(
        cluster_pb2.AuditEvent(
            at_unix_ms=now_ms,
            actor=actor,
            action="shadow",
            pool=meta.pool,
            to_version=meta.version,
            detail=f"{word} (profile {proto.profile}, {proto.samples} requests): {proto.summary}",
        )
    )
    return proto
