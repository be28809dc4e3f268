"""Which Route calls count for planning, over real gRPC, read back from the traffic in the store.

The router names callers by bearer token (``--auth-file``, the control plane's format) or, without
one, by peer address; unauthenticated and over-limit requests are routed like any other but are
left out of the traffic reports the control plane plans from.
"""

from __future__ import annotations

import time
from collections import Counter

import grpc
import pytest

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores
from dataplane.server import RouterServer
from servekit.auth_file import parse_auth, token_hash
from tests.dataplane.http_front.metrics_util import metric_sum
from tests.support.router import (
    NODES,
    ready,
    router_stub,
    running_router,
)

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
AUTH = parse_auth(
    [
        {"name": "alice", "role": "read", "sha256": token_hash("token-a")},
        {"name": "bob", "role": "write", "sha256": token_hash("token-b")},
    ]
)
RATE = 5.0


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


async def counted_keys(server: RouterServer, stores: Stores) -> Counter[str]:
    """Per-key counts of every traffic report the router wrote (after a flush)."""
    await server.traffic.flush()
    _, reports = await stores.telemetry.read_traffic("default", "0")
    counts: Counter[str] = Counter()
    for report in reports:
        for key in report.top_keys:
            counts[key.key] += key.count
    assert sum(r.total_requests for r in reports) == sum(counts.values())
    return counts


async def test_unauthenticated_and_over_limit_calls_are_served_but_not_counted(
    redis_url: str, stores: Stores
) -> None:
    async with running_router(redis_url, auth=AUTH, planning_rate_limit=RATE) as server:
        await ready(server, stores)
        async with router_stub(server) as stub:
            started = time.monotonic()
            for _ in range(20):
                answer = await stub.Route(
                    routing_pb2.RouteRequest(key="alice"), metadata=bearer("token-a")
                )
                assert answer.node_id in NODES
            elapsed = time.monotonic() - started
            batch = routing_pb2.RouteBatchRequest(
                requests=[routing_pb2.RouteRequest(key="bob") for _ in range(12)]
            )
            reply = await stub.RouteBatch(batch, metadata=bearer("token-b"))
            assert len(reply.decisions) == 12
            for _ in range(10):  # no token, a wrong token: routed, never counted
                assert (await stub.Route(routing_pb2.RouteRequest(key="anon"))).node_id
                assert (
                    await stub.Route(routing_pb2.RouteRequest(key="wrong"), metadata=bearer("nope"))
                ).node_id
        counts = await counted_keys(server, stores)
        assert RATE <= counts["alice"] <= RATE + RATE * elapsed + 1
        assert counts["bob"] == RATE  # one call: the first five of the batch
        assert counts["anon"] == counts["wrong"] == 0
        uncounted = "cacheroute_router_planning_uncounted_total"
        assert metric_sum(server, uncounted, reason="unauthenticated") == 20
        assert metric_sum(server, uncounted, reason="over_limit") == 20 - counts["alice"] + 7


async def test_without_an_auth_file_the_peer_address_is_the_client(
    redis_url: str, stores: Stores
) -> None:
    async with running_router(redis_url, planning_rate_limit=3.0) as server:
        await ready(server, stores)
        started = time.monotonic()
        for _ in range(2):  # two connections from 127.0.0.1: one client, one bucket
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = routing_pb2_grpc.RouterServiceStub(channel)
                for _ in range(10):
                    await stub.Route(routing_pb2.RouteRequest(key="p"))
        elapsed = time.monotonic() - started
        counts = await counted_keys(server, stores)
        assert 3 <= counts["p"] <= 3 + 3 * elapsed + 1


async def test_by_default_every_call_counts(redis_url: str, stores: Stores) -> None:
    async with running_router(redis_url) as server:
        await ready(server, stores)
        async with router_stub(server) as stub:
            for _ in range(30):
                await stub.Route(routing_pb2.RouteRequest(key="all"))
        assert (await counted_keys(server, stores))["all"] == 30
