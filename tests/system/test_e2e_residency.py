"""Residency end to end: simulated engines publishing KV events, agents subscribed, a control
plane, a router with its HTTP front (all real, in one process, on real Redis).

A hot key is planned on one engine; other traffic sent straight to that engine fills its cache and
evicts the key's prefix. ``cachectl status`` must show the key not resident there within 2 s
(:class:`tests.support.timing.LagMeter` judges the bound), and the next plan build demotes the
key to the tail, counted in the control plane's metrics. The router's front counts the hot key's
later turns on its first node, with the cached tokens the engine reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from cacheroute.v1 import admin_pb2
from cacheroute_state import Stores
from controlplane.server import ControlPlane
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import decode_table
from dataplane.http_front.front_config import FrontConfig
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import LLAMA_8B
from simengine.server import EngineOptions, EngineServer
from tests.support.cli import Cli
from tests.support.controlplane import SKIP_ALL, Clients, clients, fast_config, running
from tests.support.polling import eventually
from tests.support.timing import LagMeter

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(300)]

HOT = "tenant-hot"
SYSTEM = "You are the planning assistant of ACME Corp. Keep every answer short. " * 10
KV_BLOCKS = 96
WAIT_S = 60.0


async def until(check: Any, what: str) -> Any:
    """Poll an async ``check`` returning a value until it is truthy (fails after WAIT_S)."""
    found: list[Any] = []

    async def probe() -> bool:
        value = await check()
        found[:] = [value]
        return bool(value)

    try:
        await eventually(probe, timeout=WAIT_S, every=0.05)
    except AssertionError:
        raise AssertionError(f"{what}: not within {WAIT_S} s (last: {found})") from None
    return found[0]


@contextlib.asynccontextmanager
async def engines(n: int) -> AsyncIterator[list[EngineServer]]:
    options = EngineOptions(
        profile=LLAMA_8B.with_overrides(kv_blocks=KV_BLOCKS), model="m", speedup=50.0,
        kv_events_port=0,
    )  # fmt: skip
    servers = [EngineServer("127.0.0.1:0", options) for _ in range(n)]
    for server in servers:
        await server.start()
    try:
        yield servers
    finally:
        for server in servers:
            await server.stop()


@contextlib.asynccontextmanager
async def agents(
    servers: list[EngineServer], plane: ControlPlane, http: aiohttp.ClientSession
) -> AsyncIterator[list[Agent]]:
    running_agents = []
    for i, server in enumerate(servers):
        assert server.kv_events is not None
        config = AgentConfig(
            node_id=f"e{i}", address=f"127.0.0.1:{server.port}",
            metrics_url=f"{server.url}/metrics", interval_s=0.1,
            kv_events=server.kv_events.endpoint, kv_replay=server.kv_events.replay_endpoint,
        )  # fmt: skip
        running_agents.append(
            Agent(config, session=http, controlplane=plane.address, metrics=AgentMetrics())
        )
    tasks = [asyncio.create_task(a.run()) for a in running_agents]
    try:
        yield running_agents
    finally:
        for a in running_agents:
            a.stop()
        await asyncio.wait(tasks, timeout=10)


@contextlib.asynccontextmanager
async def router(redis_url: str) -> AsyncIterator[RouterServer]:
    config = RouterConfig(
        listen="127.0.0.1:0", redis_url=redis_url, router_id="r1", sample_rate=1.0,
        sample_interval_s=0.2, report_interval_s=0.3, load_interval_s=0.2, table_interval_s=0.3,
        ack_interval_s=0.5, grace_s=0.5, http=FrontConfig(listen="127.0.0.1:0"),
    )  # fmt: skip
    server = RouterServer(config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def complete(http: aiohttp.ClientSession, url: str, prompt: str, key: str = "") -> None:
    body: dict[str, Any] = {"model": "m", "prompt": prompt, "max_tokens": 2}
    if key:
        body["prompt_cache_key"] = key
    async with http.post(f"{url}/v1/completions", data=json.dumps(body)) as response:
        assert response.status == 200, await response.text()


async def table_of(stores: Stores, version: str) -> RoutingTable:
    data = await stores.plans.get_table_bytes("default", version)
    assert data is not None
    return decode_table(data, verify_hash=False)


async def node_status(c: Clients, node: str) -> admin_pb2.NodeStatus:
    """The node as ``cachectl status`` shows it (the same GetStatus call)."""
    status = await c.plans.GetStatus(admin_pb2.GetStatusRequest(pool="default"))
    (pool,) = [p for p in status.pools if p.pool == "default"]
    (found,) = [n for n in pool.nodes if n.record.node_id == node]
    return found


async def test_an_evicted_planned_prefix_shows_in_status_and_is_demoted_at_the_next_build(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with (
        engines(2) as servers,
        running(fast_config(redis_url)) as plane,
        aiohttp.ClientSession() as http,
        agents(servers, plane, http) as agents_of,
        router(redis_url) as front_router,
        clients(plane.address) as c,
    ):
        stores = plane.stores
        assert stores is not None and front_router.http is not None
        front = f"http://127.0.0.1:{front_router.http.port}"
        cli = Cli(plane, capsys)

        async def both_healthy() -> bool:
            reports = await stores.cluster.get_reports("default")
            return len(reports) == 2 and all(r.report.healthy for r in reports.values())

        await until(both_healthy, "both agents reporting healthy engines")
        await until(
            lambda: _routable(front_router), "the router sees both engines in a load snapshot"
        )

        # Traffic for the hot key (and a little else) until a live plan admits it.
        async def planned() -> str:
            for i in range(4):
                await complete(http, front, f"{SYSTEM} question {time.monotonic()} {i}", HOT)
            await complete(http, front, f"a cold request {time.monotonic()}", "cold")
            try:
                summary = await c.plans.BuildPlan(admin_pb2.BuildPlanRequest(q_cap=1e6))
            except grpc.aio.AioRpcError as exc:
                return "" if exc.code() == grpc.StatusCode.FAILED_PRECONDITION else str(exc)
            built = summary.metadata.version
            return built if (await table_of(stores, built)).destinations(hash_key(HOT)) else ""

        version = await until(planned, "a live plan that admits the hot key")
        await c.plans.Rollout(admin_pb2.RolloutRequest(version=version, **SKIP_ALL))
        table = await table_of(stores, version)
        members = table.destinations(hash_key(HOT))
        assert members is not None and len(members) == 1
        node = table.node_ids[members[0]]
        engine = servers[int(node[1:])]

        async def watched_and_resident() -> bool:
            await complete(http, front, f"{SYSTEM} question {time.monotonic()}", HOT)
            seen = await node_status(c, node)
            return seen.planned_keys_watched >= 1 and seen.planned_keys_not_resident == 0

        await until(watched_and_resident, "the hot key watched and resident on its node")

        agent = agents_of[int(node[1:])]
        assert agent.reporter.watch is not None
        (anchor,) = [a for k, a in agent.reporter.watch[1] if k == hash_key(HOT)]
        with LagMeter() as meter:
            evicted_at = None
            for i in range(12):  # 12 prompts of ~13 blocks each: more than the 96-block cache
                await complete(http, engine.url, f"filler {i} evicts whatever was there. " * 21)
                if evicted_at is None and anchor not in engine.engine.node.cache:
                    evicted_at = time.monotonic()  # within one filler request of the eviction
            assert evicted_at is not None, "the filler did not evict the hot key's prefix"

            async def shown() -> bool:
                return (await node_status(c, node)).planned_keys_not_resident == 1

            await until(shown, "cachectl status showing the hot key's prefix gone")
            elapsed = time.monotonic() - evicted_at
            meter.claim(elapsed <= 2.0, f"eviction shown in cachectl status after {elapsed:.2f} s")
        out = await cli.ok("status")
        assert "KV-cache residency" in out and node in out

        rebuilt = await c.plans.BuildPlan(admin_pb2.BuildPlanRequest(q_cap=1e6))
        after = await table_of(stores, rebuilt.metadata.version)
        assert after.destinations(hash_key(HOT)) is None
        demoted = plane.metrics.keys_demoted.labels("default")._value.get()
        assert demoted >= 1

        # The front measured delivered affinity on the way (the hot key's later turns).
        registry = front_router.metrics.registry
        labels = {"door": "http", "pool": "default"}
        followups = registry.get_sample_value(
            "cacheroute_router_followups_total", {**labels, "node": "first"}
        )
        cached = registry.get_sample_value("cacheroute_router_followup_cached_tokens_total", labels)
        assert (followups or 0) > 0 and (cached or 0) > 0
        cov = registry.get_sample_value("cacheroute_router_fleet_load_cov", {"pool": "default"})
        assert cov is not None and cov >= 0  # set with every applied snapshot (idle now: 0)


async def _routable(server: RouterServer) -> bool:
    pool = server.router.pools.get("default")
    return pool is not None and len(pool.view.eligible_nodes) == 2
