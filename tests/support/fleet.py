"""A simulated engine fleet's telemetry, as the control plane stores it: Flat-LB windows (what
the agents' histograms would say under Flat-LB) and the routers' sampled trace of its traffic.

The fleet serves requests *as the sampler describes them* (prompt = 16 tokens per sampled block,
at most 64 blocks, answers of ``OUTPUT_TOKENS``): the fit replays the sampled trace, so a fleet
whose requests differ from their samples would be fitted to the difference as well (documented in
controlplane/lifecycle/fleet_profile.py); these tests check the fit, not the sampler."""

from __future__ import annotations

from collections.abc import Sequence

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.shadow import samples_to_requests
from sim.cluster import ClusterConfig, simulate
from sim.engine_model import EngineProfile
from sim.types import SimRequest

ROUTER_BLOCKS = 64  # a router hashes at most the first 4,096 bytes: 64 blocks


def sampled(
    pool: str, requests: Sequence[SimRequest], start_ms: int
) -> list[cluster_pb2.SampledRequest]:
    return [
        cluster_pb2.SampledRequest(
            pool=pool, at_unix_ms=start_ms + int(r.arrival_s * 1000), key_hash=r.key_hash,
            key=r.key, prefix_blocks=list(r.blocks[:ROUTER_BLOCKS]), router_id="r1",
        )
        for r in requests
    ]  # fmt: skip


def as_served(pool: str, requests: Sequence[SimRequest]) -> list[SimRequest]:
    """The requests with the sizes their samples give them (module docstring)."""
    return samples_to_requests(sampled(pool, requests, 0), 0)


async def record_flat_windows(
    stores: Stores,
    pool: str,
    truth: EngineProfile,
    nodes: int,
    served_at: dict[float, Sequence[SimRequest]],
) -> None:
    """One Flat-LB window per rate: the truth fleet's TTFT p50/p99 serving that traffic."""
    for i, (qps, requests) in enumerate(sorted(served_at.items())):
        run = simulate(as_served(pool, requests), "flat", ClusterConfig(profile=truth, nodes=nodes))
        window = cluster_pb2.FleetWindow(
            pool=pool, start_unix_ms=i * 60_000, end_unix_ms=(i + 1) * 60_000, qps=qps,
            ttft_p50_s=run.ttft_p50_s, ttft_p99_s=run.ttft_p99_s, samples=len(requests),
            nodes=nodes,
        )  # fmt: skip
        await stores.telemetry.add_fleet_window(window, keep=30)
