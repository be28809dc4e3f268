"""Routers report per-key reusable-prefix sizes; a live build's byte-aware admission uses them.

A real router (gRPC on loopback, the in-memory state twin) routes RouteRequests carrying chained
prefix blocks, writes its traffic report, and a real control plane's BuildPlan (with
``--cache-budget``) admits by those sizes, a configured size winning over the reported one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cacheroute.v1 import admin_pb2, routing_pb2
from cacheroute_state import Stores
from controlplane.cluster.key_rate_tracker import current_rates
from controlplane.core.live_sizes import plan_sizes
from dataplane.core.keys import chain_block, hash_key
from dataplane.core.prefix_sizes import PROMPT_EVERY, SAMPLE_EVERY
from tests.support.controlplane import clients, fast_config, running
from tests.support.router import ready, router_stub, running_router

pytestmark = [pytest.mark.grpc]
SHARED = {"big": 200, "small": 8, "huge": 300, "cfg": 8}  # leading blocks each key's requests share
RUN = 4 * SAMPLE_EVERY  # one key's requests in a row, so every key gets sampled


def blocks(key: str, shared: int, request: int) -> list[int]:
    """``shared`` blocks common to the key's requests, then 5 unique to this request."""
    out, parent = [], 0
    for i in range(shared + 5):
        tag = f"{key}/{i}" if i < shared else f"{key}/{request}/{i}"
        parent = chain_block(parent, tag.encode())
        out.append(parent)
    return out


def requests(key: str, start: int) -> Iterator[routing_pb2.RouteRequest]:
    for n in range(start, start + RUN):
        yield routing_pb2.RouteRequest(key=key, prefix_blocks=blocks(key, SHARED[key], n))


async def route_and_report(state_url: str, stores: Stores) -> None:
    async with running_router(state_url) as server:
        await ready(server, stores)
        async with router_stub(server) as stub:
            for round_ in range(2):
                for key in SHARED:
                    batch = routing_pb2.RouteBatchRequest(requests=requests(key, round_ * RUN))
                    assert len((await stub.RouteBatch(batch)).decisions) == RUN
        await server.traffic.flush()


async def test_reported_sizes_reach_the_estimate_and_configured_ones_win(
    state_url: str, state_stores: Stores
) -> None:
    await route_and_report(state_url, state_stores)
    _, reports = await state_stores.telemetry.read_traffic("default", "0")
    sampled = {kc.key: kc for r in reports for kc in r.top_keys}
    assert all(sampled[key].prefix_samples == 7 for key in SHARED)  # 8 samples, 7 comparisons
    rates = await current_rates(state_stores, "default", 60.0, 1000)
    reported = {rates.labels[h]: s for h, s in rates.prefix_blocks.items()}
    for key, shared in SHARED.items():  # a lower bound within 1/8
        assert shared * 7 / 8 <= reported[key] <= shared
    sized = plan_sizes(rates.key_hashes, rates.labels, rates.prefix_blocks, {"cfg": 500.0})
    assert sized is not None and (sized.configured, sized.reported, sized.filled) == (1, 3, 0)
    by_key = dict(zip(rates.key_hashes.tolist(), sized.sizes.tolist(), strict=True))
    assert by_key[hash_key("cfg")] == 500.0


async def test_a_live_build_admits_by_the_routers_sizes_within_the_cache_budget(
    state_url: str, state_stores: Stores
) -> None:
    await route_and_report(state_url, state_stores)
    # One destination of 250 blocks: big (~200) and small (~8) fit; huge (~300 reported) and
    # cfg (8 reported, 500 configured) do not. Equal slots would admit all four.
    byte_aware = fast_config(state_url, cache_budget=250.0, prefix_sizes={"cfg": 500.0})
    for config, want in [
        (byte_aware, {"big", "small"}),
        (fast_config(state_url), set(SHARED)),
    ]:
        async with running(config) as plane, clients(plane.address) as c:
            if config is byte_aware:  # a static node: the second instance finds it stored
                await c.nodes.AddNode(admin_pb2.AddNodeRequest(node_id="n0", address="h:1"))
            built = await c.plans.BuildPlan(admin_pb2.BuildPlanRequest())
            shown = await c.plans.GetPlan(admin_pb2.GetPlanRequest(version=built.metadata.version))
            assert {k.key for k in shown.top_keys} == want


async def test_prompt_only_requests_are_sized_from_their_prompt_blocks(
    state_url: str, state_stores: Stores
) -> None:
    system = ("You are a careful assistant for the billing team. " * 60)[:2048]  # 32 blocks
    per_hash = SAMPLE_EVERY * PROMPT_EVERY  # counted requests per hashed prompt sample
    async with running_router(state_url) as server:
        await ready(server, state_stores)
        async with router_stub(server) as stub:
            for batch_no in range(3):
                batch = routing_pb2.RouteBatchRequest(
                    requests=[
                        routing_pb2.RouteRequest(
                            key="chat", prompt_prefix=f"{system}user {batch_no}-{n}: hello"
                        )
                        for n in range(per_hash)
                    ]
                )
                await stub.RouteBatch(batch)
        await server.traffic.flush()
    _, reports = await state_stores.telemetry.read_traffic("default", "0")
    (chat,) = [kc for r in reports for kc in r.top_keys if kc.key == "chat"]
    assert chat.prefix_samples == 2 and chat.reusable_prefix_blocks == 32.0
