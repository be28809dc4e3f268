"""The live path's cluster for end-to-end tests: a control plane, two routers and stub agents on
one Redis, with cachectl and the routers' answers at hand.

Apart from the scenarios (tests/system/test_live_path.py) so that what is started, and how it is
stopped, reads in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np

from cachectl.main import main
from cacheroute.v1 import admin_pb2, routing_pb2, routing_pb2_grpc
from controlplane.core.planner import PlanInput, build_plan
from controlplane.server import ControlPlane
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import encode_table
from dataplane.server import RouterConfig, RouterServer
from tests.support.controlplane import (
    Clients,
    StubAgent,
    clients,
    fast_config,
    report,
    running,
)
from tests.support.polling import eventually
from tests.support.router import PAPER_DISPATCH

NODES = [f"engine-{i}" for i in range(4)]
KEYS = [f"tenant-{i}" for i in range(40)]


def plan_for(seed: int) -> RoutingTable:
    """A plan over the stub agents' nodes; different seeds give different placements."""
    rates = np.random.default_rng(seed).pareto(1.2, len(KEYS)) + 0.5
    return build_plan(
        PlanInput(
            key_hashes=np.array([hash_key(k) for k in KEYS], dtype=np.uint64),
            rates=rates,
            node_ids=NODES,
            q_cap=float(rates.sum()) / len(NODES),
            slots_per_node=4,
            key_labels={hash_key(k): k for k in KEYS},
        )
    )


def warm_keys(table: RoutingTable) -> list[str]:
    return [k for k in KEYS if table.find(hash_key(k)) >= 0]


@dataclass
class Cluster:
    plane: ControlPlane
    admin: Clients
    routers: list[RouterServer]
    stubs: list[routing_pb2_grpc.RouterServiceAsyncStub]
    stack: AsyncExitStack

    async def cachectl(self, *argv: str) -> int:
        """Run cachectl in a worker thread: the event loop serves the cluster meanwhile."""

        def run() -> int:
            try:
                return main([*argv, "--target", self.plane.address])
            except SystemExit as exc:
                return exc.code if isinstance(exc.code, int) else 2

        return await asyncio.to_thread(run)

    async def add_router(self, router_id: str) -> routing_pb2_grpc.RouterServiceAsyncStub:
        server = RouterServer(
            RouterConfig(
                listen="127.0.0.1:0",
                redis_url=self.plane.config.redis_url or "",
                router_id=router_id,
                table_interval_s=0.5,
                load_interval_s=0.5,
                ack_interval_s=1.0,
                grace_s=0.5,
                metrics_listen=None,
                **PAPER_DISPATCH,  # these tests follow the table's mechanics: WARM answers
            )
        )
        await server.start()
        self.stack.push_async_callback(server.stop)
        channel = grpc.aio.insecure_channel(server.address)
        self.stack.push_async_callback(channel.close)
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        self.routers.append(server)
        self.stubs.append(stub)
        return stub  # type: ignore[no-any-return]

    async def generations(self) -> dict[str, int]:
        """Router id → the generation it ACKed, as `cachectl status` sees it."""
        status = await self.admin.plans.GetStatus(admin_pb2.GetStatusRequest(pool="default"))
        return {
            ack.router_id: ack.generation
            for pool in status.pools
            for ack in pool.routers
            if ack.accepted
        }


@asynccontextmanager
async def cluster(redis_url: str) -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as stack:
        plane = await stack.enter_async_context(running(fast_config(redis_url)))
        admin = await stack.enter_async_context(clients(plane.address))
        agents = [StubAgent(admin.agents) for _ in NODES]
        for node, agent in zip(NODES, agents, strict=True):
            await agent.send(report(node, address=f"127.0.0.1:{8000 + NODES.index(node)}"))
            await agent.read()  # the join directive
        heartbeat = asyncio.create_task(_heartbeats(agents))
        stack.push_async_callback(_stop, heartbeat)
        live = Cluster(plane, admin, [], [], stack)
        for router_id in ("router-a", "router-b"):
            await live.add_router(router_id)

        async def every_router_sees_the_nodes() -> bool:
            for stub in live.stubs:
                try:
                    await stub.Route(routing_pb2.RouteRequest(key="probe"))
                except grpc.aio.AioRpcError:
                    return False
            return True

        await eventually(every_router_sees_the_nodes, timeout=10)
        yield live


async def _heartbeats(agents: list[StubAgent]) -> None:
    while True:
        for node, agent in zip(NODES, agents, strict=True):
            await agent.send(report(node, address=f"127.0.0.1:{8000 + NODES.index(node)}"))
        await asyncio.sleep(0.05)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def answers(
    stub: routing_pb2_grpc.RouterServiceAsyncStub, keys: list[str]
) -> list[routing_pb2.RouteDecision]:
    return [await stub.Route(routing_pb2.RouteRequest(key=k)) for k in keys]


async def follow(
    stub: routing_pb2_grpc.RouterServiceAsyncStub, table: RoutingTable, generation: int
) -> bool:
    """Every warm key is answered from `table` at `generation`, inside its destination set."""
    for decision in await answers(stub, warm_keys(table)):
        sets = table.destination_ids(decision.key_hash) or []
        if decision.generation != generation or decision.version != table.version:
            return False
        if decision.reason != routing_pb2.ROUTE_REASON_WARM or decision.node_id not in sets:
            return False
    return True


async def import_plan(live: Cluster, table: RoutingTable, path: Path) -> None:
    path.write_bytes(encode_table(table))
    assert await live.cachectl("plan", "import", str(path)) == 0
