"""The cluster loop: cache accounting against an independent ideal, conservation, routing inputs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dataplane.core.load_view import LoadView
from dataplane.core.policies.base import Decision, Policy, Reason, Request
from sim.cluster import Cluster, ClusterConfig, simulate
from sim.engine_model import LLAMA_70B
from sim.types import BLOCK_TOKENS, SimRequest
from sim.workloads.paper import PaperWorkload
from sim.workloads.stats import ideal_hit
from tests.support.tiny_workload import TinyWorkload

CONFIG = ClusterConfig(profile=LLAMA_70B, nodes=4, seed=3)


def ideal_hit_rate(requests: list[SimRequest]) -> float:
    """Token-weighted hit of an infinite cache that has seen every earlier request's blocks.

    Same accounting as an engine: the hit is the leading run of already-seen blocks, and at
    least the last prompt token is always computed.
    """
    seen: set[int] = set()
    cached = prompt = 0
    for request in requests:
        run = 0
        for block in request.blocks:
            if block not in seen:
                break
            run += 1
        cached += min(run * BLOCK_TOKENS, request.prompt_tokens - 1)
        prompt += request.prompt_tokens
        seen.update(request.blocks)
    return cached / prompt


def test_unbounded_cache_on_one_destination_hits_the_ideal_rate() -> None:
    requests = TinyWorkload(keys=30, shared_blocks=50).requests(qps=2.0, duration_s=300, seed=5)
    config = ClusterConfig(
        profile=LLAMA_70B.with_overrides(kv_blocks=10_000_000), nodes=1, timeout_s=1e9
    )
    metrics = simulate(requests, "flat", config)
    expected = ideal_hit_rate(requests)
    assert 0.3 < expected < 0.9
    assert metrics.served == len(requests)
    assert metrics.kv_hit == pytest.approx(expected, abs=1e-12)
    assert metrics.evictions == 0


def test_unbounded_cache_matches_the_paper_workloads_own_ideal_hit_rate() -> None:
    """The workload module computes its ideal independently (vectorised, from the blocks)."""
    requests = PaperWorkload(top_k=16).requests(qps=2.0, duration_s=600, seed=3)
    config = ClusterConfig(
        profile=LLAMA_70B.with_overrides(kv_blocks=10_000_000), nodes=1, timeout_s=1e9
    )
    metrics = simulate(requests, "flat", config)
    assert metrics.served == len(requests)
    assert metrics.kv_hit == pytest.approx(ideal_hit(requests, outputs=True), abs=1e-9)


def test_a_small_cache_hits_less_than_the_ideal() -> None:
    requests = TinyWorkload(keys=30, shared_blocks=50).requests(qps=2.0, duration_s=300, seed=5)
    config = ClusterConfig(profile=LLAMA_70B.with_overrides(kv_blocks=300), nodes=1)
    metrics = simulate(requests, "flat", config)
    assert metrics.evictions > 0
    assert metrics.kv_hit < ideal_hit_rate(requests) - 0.05


@pytest.mark.parametrize("policy", ["flat", "cacheroute", "preble"])
def test_requests_and_tokens_are_conserved(policy: str) -> None:
    requests = TinyWorkload(prompt_tokens=3000, output_tokens=40).requests(
        qps=20.0, duration_s=30, seed=2
    )
    config = replace(
        CONFIG, profile=LLAMA_70B.with_overrides(kv_blocks=3000, max_batched_tokens=2048),
        drain_all=True,
    )  # fmt: skip
    cluster = Cluster(requests, policy, config)
    metrics = cluster.run()
    jobs = cluster.jobs
    assert len(jobs) == len(requests) == metrics.requests
    assert all(j.finish >= 0.0 or j.rejected for j in jobs)  # every request ended
    assert all(j.finish >= j.first_token >= j.arrival for j in jobs if not j.rejected)
    served = [j for j in jobs if not j.rejected]
    assert metrics.served == len(served)
    prefilled = sum(node.prefilled_total for node in cluster.nodes)
    assert prefilled == sum(j.prompt - j.cached for j in served)  # prompt = cached + prefilled
    assert metrics.prompt_tokens == sum(j.prompt for j in served)
    assert metrics.cached_tokens == sum(j.cached for j in served)
    for node in cluster.nodes:  # nothing left pinned or reserved once all finished
        assert node.cache.pinned == 0 and node.cache.reserved == 0
        assert node.decoding == 0 and node.decode_context == 0 and not node.waiting
    assert sum(cluster.routed) == len(requests)


def test_a_request_larger_than_the_cache_fails_instead_of_blocking() -> None:
    requests = [
        SimRequest(0.0, "big", 1, tuple(range(1, 101)), 1600, 10),
        SimRequest(0.1, "small", 2, tuple(range(200, 210)), 160, 10),
    ]
    config = ClusterConfig(profile=LLAMA_70B.with_overrides(kv_blocks=50), nodes=1)
    metrics = simulate(requests, "flat", config)
    assert metrics.served == 1 and metrics.failures == pytest.approx(0.5)


class SpyPolicy(Policy):
    """Always node 0; records what the view shows at each decision."""

    name = "spy"

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[tuple[float, float, float, int]] = []
        self.now = 0.0

    def choose(self, request: Request, view: LoadView) -> Decision:
        self.seen.append((view.snapshot_observed_at, view.loads[0], view.loads[1], 0))
        return Decision(0, Reason.P2C)


def test_snapshots_and_in_flight_correction_reach_every_router() -> None:
    requests = TinyWorkload().requests(qps=40.0, duration_s=5, seed=9)
    config = replace(CONFIG, nodes=2, routers=2, snapshot_interval_s=0.5)
    cluster = Cluster(requests, "flat", config)
    spies = [SpyPolicy(), SpyPolicy()]
    for router, spy in zip(cluster.routers, spies, strict=True):
        router.policy = spy
    snapshots: list[tuple[float, list[int]]] = []
    original = cluster._snapshot

    def recording_snapshot(now: float) -> None:
        snapshots.append((now, [n.load for n in cluster.nodes]))
        original(now)

    cluster._snapshot = recording_snapshot  # type: ignore[method-assign]
    cluster.run()
    assert cluster.snapshots == len(snapshots) > 5
    by_time = dict((t, loads) for t, loads in snapshots)
    for r, spy in enumerate(spies):
        mine = [i for i in range(len(requests)) if i % 2 == r]
        assert len(spy.seen) == len(mine)
        since: dict[float, int] = {}
        for i, (observed, load0, load1, _) in zip(mine, spy.seen, strict=True):
            arrival = requests[i].arrival_s
            assert observed <= arrival < observed + 0.5  # the latest snapshot
            base = by_time[observed]
            # node 0: the snapshot plus this router's own decisions since it (correction)
            assert load0 == base[0] + since.get(observed, 0)
            assert load1 == base[1]  # never chosen: snapshot only
            since[observed] = since.get(observed, 0) + 1


def test_same_seed_gives_identical_results() -> None:
    requests = TinyWorkload().requests(qps=30.0, duration_s=20, seed=4)
    config = replace(CONFIG, routers=2, warmup_s=5)
    first = simulate(requests, "flat", config)
    second = simulate(requests, "flat", config)
    assert first == second
    other = simulate(requests, "flat", replace(config, seed=99))
    assert other.ttft_p99_s != first.ttft_p99_s  # the policy's coin flips follow the seed


def test_warm_up_requests_are_excluded_from_metrics() -> None:
    requests = TinyWorkload().requests(qps=10.0, duration_s=20, seed=4)
    metrics = simulate(requests, "flat", replace(CONFIG, warmup_s=10))
    assert metrics.requests == sum(1 for r in requests if r.arrival_s >= 10)
    assert metrics.requests_total == len(requests)


def test_an_overloaded_run_aborts_early_with_a_censored_p99() -> None:
    requests = TinyWorkload(prompt_tokens=4000).requests(qps=60.0, duration_s=120, seed=1)
    config = replace(CONFIG, nodes=1, abort_above_s=5.0)
    metrics = simulate(requests, "flat", config)
    assert metrics.aborted and metrics.p99_censored
    assert metrics.ttft_p99_s > 5.0
    assert metrics.sim_end_s < 60.0
