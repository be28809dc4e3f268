"""Helpers of the router tests: a router in-process, its stub, plans rolled out, snapshots."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import grpc

from cacheroute.v1 import cluster_pb2, routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.server import RouterConfig, RouterServer
from tests.support.polling import eventually

NODES = [f"node-{i}" for i in range(4)]
QUIET = {  # timers long enough that only hints (or the test) trigger work
    "table_interval_s": 60.0,
    "load_interval_s": 60.0,
    "report_interval_s": 60.0,
    "sample_interval_s": 60.0,
    "ack_interval_s": 60.0,
}

# Tests of the table's mechanics (rollouts, outages, deltas, the doors, health) run the paper's
# dispatch: a warm key's answer is the least-loaded member of its set with no load bound, so what
# they assert is a function of the table and the loads alone. The default policy
# (cacheroute_balanced) bounds a member's load and follows conversations; its own tests are
# tests/core/test_policies_cacheroute_balanced.py and, through the HTTP front with the real
# openai client, tests/dataplane/http_front/test_front_load.py.
PAPER_DISPATCH = {"policy": "cacheroute"}


@asynccontextmanager
async def running_router(state_url: str, **overrides: Any) -> AsyncIterator[RouterServer]:
    settings: dict[str, Any] = {
        **QUIET,
        **PAPER_DISPATCH,
        "listen": "127.0.0.1:0",
        "redis_url": state_url,
        "router_id": "r1",
        "startup_timeout_s": 3.0,
        "grace_s": 0.5,
        **overrides,
    }
    server = RouterServer(RouterConfig(**settings))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def router_stub(
    server: RouterServer,
) -> AsyncIterator[routing_pb2_grpc.RouterServiceAsyncStub]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield routing_pb2_grpc.RouterServiceStub(channel)  # type: ignore[misc]


def load_snapshot(
    loads: dict[str, float],
    *,
    seq: int,
    pool: str = "default",
    unhealthy: tuple[str, ...] = (),
    draining: tuple[str, ...] = (),
    addresses: Mapping[str, str] | None = None,
) -> cluster_pb2.LoadSnapshot:
    """A snapshot of ``loads`` per node; a node's address is ``addresses[node]``, else made up."""
    return cluster_pb2.LoadSnapshot(
        pool=pool,
        seq=seq,
        observed_at_unix_ms=int(time.time() * 1000),
        nodes=[
            cluster_pb2.NodeLoad(
                node_id=node,
                address=addresses[node] if addresses else f"{node}.engines:8000",
                load=load,
                healthy=node not in unhealthy,
                draining=node in draining,
            )
            for node, load in loads.items()
        ],
    )


async def rollout(stores: Stores, version: str, pool: str = "default") -> int:
    active = await stores.plans.get_active(pool)
    pointer = await stores.plans.move_active(
        pool,
        version,
        expected_generation=active.generation if active else 0,
        actor="test",
        action="rollout",
    )
    return pointer.generation


async def ack_of(stores: Stores, router_id: str = "r1", pool: str = "default") -> Any:
    return next((a for a in await stores.cluster.get_acks(pool) if a.router_id == router_id), None)


def warm_keys(table: RoutingTable) -> list[str]:
    return [label.key for label in table.top_keys if table.find(label.key_hash) >= 0]


def follows(table: RoutingTable, key: str, decision: routing_pb2.RouteDecision) -> bool:
    destinations = table.destination_ids(hash_key(key))
    return destinations is not None and decision.node_id in destinations


def scrape(server: RouterServer) -> str:
    assert server.metrics_endpoint is not None
    with urllib.request.urlopen(server.metrics_endpoint.url, timeout=5) as reply:
        return str(reply.read().decode())


async def ready(server: RouterServer, stores: Stores) -> None:
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

    async def synced() -> bool:
        return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

    await eventually(synced)
