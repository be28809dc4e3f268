"""An agent against the real control plane (controlplane.server, in-process on port 0, real Redis).

Join → the node is registered with its dialect and kind, the control plane's report interval is
adopted, a dead engine shows as stale in the stored report, a control-plane restart is survived
with seq going on, and shutdown stores ``leaving``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from agents.dialing import Backoff
from cacheroute.v1 import agent_pb2
from cacheroute_state.interfaces import ReportRecord
from controlplane.config import ControlPlaneConfig
from controlplane.server import ControlPlane
from tests.support.agents import EngineStub, engine, wait_until

__all__ = ["engine"]

pytestmark = [pytest.mark.grpc, pytest.mark.redis]


async def start_controlplane(redis_url: str, port: int = 0) -> ControlPlane:
    config = ControlPlaneConfig(
        listen=f"127.0.0.1:{port}",
        redis_url=redis_url,
        metrics_listen="",
        load_publish_interval_s=0.1,
        grace_s=0.5,
        log_json=True,
    )
    cp = ControlPlane(config)
    await cp.start()
    return cp


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def test_an_agent_joins_survives_a_restart_and_leaves_the_real_control_plane(
    redis_url: str, engine: EngineStub, session: aiohttp.ClientSession
) -> None:
    cp = await start_controlplane(redis_url)
    port = int(cp.address.rsplit(":", 1)[1])
    engine.serve("sglang_colon_a")
    agent = Agent(
        AgentConfig(
            node_id="gpu-a",
            address=f"127.0.0.1:{engine.port}",
            metrics_url=f"{engine.url}/metrics",
            pool="chat",
            interval_s=0.05,
        ),
        session=session,
        controlplane=cp.address,
        metrics=AgentMetrics(),
        backoff=Backoff(base_s=0.05, cap_s=0.2, rng=random.Random(5)),
    )
    task = asyncio.create_task(agent.run())

    async def refresh() -> ReportRecord | None:
        assert cp.stores is not None
        return await cp.stores.cluster.get_report("chat", "gpu-a")

    try:
        await wait_until(lambda: agent.reporter.interval_ms == 100)  # the CP's directive
        assert cp.stores is not None
        node = await cp.stores.cluster.get_node("chat", "gpu-a")
        assert node is not None and node.address == f"127.0.0.1:{engine.port}"
        assert node.dialect == agent_pb2.METRIC_DIALECT_SGLANG_COLON
        assert node.engine_kind == agent_pb2.ENGINE_KIND_SGLANG
        record = await refresh()
        assert record is not None and record.report.healthy and record.report.running == 7.0

        seq_before = agent.reporter.seq
        await cp.stop()
        cp = await start_controlplane(redis_url, port)
        await wait_until(lambda: agent.reporter.connected and agent.reporter.seq > seq_before + 2)
        record = await refresh()
        assert record is not None and record.report.seq > seq_before

        engine.status = 503  # the engine stops answering
        for _ in range(100):
            record = await refresh()
            if record is not None and record.report.stale:
                break
            await asyncio.sleep(0.02)
        assert record is not None and record.report.stale and not record.report.healthy
        assert record.report.running == 7.0  # the old load, not zero

        agent.stop()
        await asyncio.wait_for(task, 5)
        record = await refresh()
        assert record is not None and record.report.leaving
    finally:
        agent.stop()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 5)
        await cp.stop()
