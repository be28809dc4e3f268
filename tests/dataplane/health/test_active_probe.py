"""Active probes: with every control plane away, a router finds a dead engine by itself.

Real parts: a real router over gRPC (port 0) on a real redis-server, a real rolled-out table over
three destinations that are real listening sockets, plain ``Route`` callers (no ``Release``
outcomes, so passive health learns nothing) and no control plane (the one stored snapshot goes
stale). Closing one listener gets it ejected after the probe streak; reopening it restores it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import structlog
from prometheus_client import CollectorRegistry

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores
from dataplane.core.active_probes import ProbeConfig
from dataplane.core.router import Router
from dataplane.health.active_probe import ActiveProber, tcp_probe
from tests.support.factories import small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import load_snapshot, rollout, router_stub, running_router
from tests.support.state import on_redis

NODES = ["node-0", "node-1", "node-2"]
FAST = ProbeConfig(interval_s=0.1, after_stale_s=0.5, failures=3, timeout_s=1.0)


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


async def _accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@asynccontextmanager
async def listening(port: int = 0) -> AsyncIterator[asyncio.Server]:
    """A real TCP listener on loopback (an engine's port, as a probe sees it)."""
    server = await asyncio.start_server(_accept, "127.0.0.1", port)
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()


def port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


async def destinations(
    stub: routing_pb2_grpc.RouterServiceAsyncStub, calls: int = 200
) -> dict[str, int]:
    """Where ``calls`` plain Route calls went (table keys and keys outside it), by node id."""
    seen: dict[str, int] = {}
    for i in range(calls):
        key = f"key-{i % 20}" if i % 2 else f"other-{i}"
        decision = await stub.Route(routing_pb2.RouteRequest(key=key))
        seen[decision.node_id] = seen.get(decision.node_id, 0) + 1
    return seen


@pytest.mark.grpc
@on_redis
async def test_with_every_control_plane_away_a_dead_engine_is_probed_out_and_back(
    state_url: str, stores: Stores
) -> None:
    async with listening() as e0, listening() as e1, listening() as e2:
        ports = dict(zip(NODES, (port_of(e0), port_of(e1), port_of(e2)), strict=True))
        addresses = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
        table = small_plan(nodes=3)
        await rollout(stores, await store_plan(stores, table))
        # The last snapshot a control plane published; none publishes after it.
        snapshot = load_snapshot(dict.fromkeys(NODES, 0.0), seq=1, addresses=addresses)
        await stores.cluster.publish_load(snapshot)
        with structlog.testing.capture_logs() as logs:
            async with (
                running_router(state_url, probes=FAST) as server,
                router_stub(server) as stub,
            ):
                state = server.router.pools["default"]
                assert state.table_version == table.version
                assert set(await destinations(stub)) == set(NODES)

                e1.close()  # node-1's engine dies; nobody tells the router
                await e1.wait_closed()

                async def node_1_ejected() -> bool:
                    return "node-1" in state.probes.ejected

                await eventually(node_1_ejected, timeout=30.0, every=0.05)
                after = await destinations(stub)
                assert "node-1" not in after and set(after) == {"node-0", "node-2"}

                async with listening(ports["node-1"]):  # the engine is back on its port

                    async def node_1_restored() -> bool:
                        return not state.probes.ejected

                    await eventually(node_1_restored, timeout=30.0, every=0.05)
                    assert set(await destinations(stub)) == set(NODES)
                samples = server.metrics.registry.get_sample_value
                ejections = samples(
                    "cacheroute_router_active_probe_ejections_total",
                    {"pool": "default", "node": "node-1"},
                )
    assert ejections == 1
    ejected = [e for e in logs if e["event"] == "destination ejected by active probe"]
    restored = [e for e in logs if e["event"] == "probed destination restored"]
    assert [(e["node"], e["address"]) for e in ejected] == [("node-1", addresses["node-1"])]
    assert [(e["node"], e["reason"]) for e in restored] == [("node-1", "probe succeeded")]
    stale = [e for e in logs if e["event"] == "load snapshots stale; probing destinations"]
    assert len(stale) == 1


async def test_fresh_snapshots_mean_no_probes_and_end_probe_ejections() -> None:
    async with listening() as alive:
        router = Router(policy="flat", probes=FAST)
        addresses = {"a": f"127.0.0.1:{port_of(alive)}", "b": "127.0.0.1:1", "c": "nonsense"}
        snapshot = load_snapshot(dict.fromkeys("abc", 0.0), seq=1, addresses=addresses)
        registry = CollectorRegistry()
        prober = ActiveProber(router, FAST, registry)
        router.apply_load(snapshot, now=time.time())
        assert await prober.tick() == []  # fresh: nothing probed
        probed = {"pool": "default", "result": "failed"}
        assert registry.get_sample_value("cacheroute_router_active_probes_total", probed) is None
        state = router.pools["default"]
        state.load_applied_at = time.time() - 60  # a minute without snapshots
        for _ in range(FAST.failures):
            await prober.tick()
        assert state.probes.ejected == {"b"}  # "c" is no HOST:PORT: never judged
        assert state.view.nodes.index["b"] not in state.view.eligible_nodes
        assert registry.get_sample_value("cacheroute_router_active_probes_total", probed) == 3
        snapshot.seq = 2
        router.apply_load(snapshot, now=time.time())  # a control plane is back
        changes = await prober.tick()
        assert [(c.node_id, c.ejected) for c in changes] == [("b", False)]
        assert state.probes.ejected == frozenset() and not state.outliers.probed


async def test_tcp_probe_tells_a_listener_from_a_closed_port() -> None:
    async with listening() as server:
        port = port_of(server)
        assert await tcp_probe(f"127.0.0.1:{port}", 1.0) is True
    assert await tcp_probe(f"127.0.0.1:{port}", 1.0) is False
    assert await tcp_probe("not-an-address", 1.0) is None
