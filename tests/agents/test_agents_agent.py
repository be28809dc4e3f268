"""agents.agent: every dialect gives the same NodeReport; the scrape → report loop end to end."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agents.agent import Agent, AgentConfig
from agents.agent_metrics import AgentMetrics
from agents.dialing import Backoff
from cacheroute.v1 import agent_pb2
from tests.support.agents import (
    DIALECT_SAMPLES,
    EXPECTED,
    ControlPlaneStub,
    EngineStub,
    controlplane,
    engine,
    wait_until,
)

__all__ = ["controlplane", "engine"]

pytestmark = pytest.mark.grpc


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def make_agent(
    engine: EngineStub,
    session: aiohttp.ClientSession,
    controlplane: str = "127.0.0.1:9",
    **config: object,
) -> Agent:
    cfg = AgentConfig(
        node_id="n1",
        address=f"127.0.0.1:{engine.port}",
        metrics_url=f"{engine.url}/metrics",
        interval_s=0.05,
        **config,  # type: ignore[arg-type]
    )
    return Agent(
        cfg,
        session=session,
        controlplane=controlplane,
        metrics=AgentMetrics(),
        backoff=Backoff(base_s=0.05, cap_s=0.2, rng=random.Random(3)),
    )


async def two_scrape_report(
    name: str, engine: EngineStub, session: aiohttp.ClientSession
) -> agent_pb2.NodeReport:
    agent = make_agent(engine, session, weight=2.0)
    engine.serve(f"{name}_a")
    await agent.scraper.scrape()
    engine.serve(f"{name}_b")
    return agent.build_report(await agent.scraper.scrape())


@pytest.mark.parametrize("name", DIALECT_SAMPLES)
async def test_each_dialect_yields_the_same_node_report(
    name: str, engine: EngineStub, session: aiohttp.ClientSession
) -> None:
    got = await two_scrape_report(name, engine, session)
    assert (got.dialect, got.engine_kind) == EXPECTED[name]
    assert (got.node_id, got.pool, got.address) == ("n1", "default", f"127.0.0.1:{engine.port}")
    assert got.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert got.healthy and not got.stale and got.error == ""
    assert (got.running, got.waiting) == (7.0, 3.0)
    assert got.kv_usage == pytest.approx(0.42)
    assert got.HasField("prefix_hit_rate")
    assert got.prefix_hit_rate == pytest.approx(0.75)
    assert (got.kv_capacity_tokens, got.block_size) == (131_072, 16)
    assert got.prompt_tokens_per_s > 0 and got.generation_tokens_per_s > 0
    assert (got.weight, got.report_interval_ms, got.leaving) == (2.0, 50, False)


async def test_a_report_before_any_good_scrape_is_stale_and_unhealthy(
    engine: EngineStub, session: aiohttp.ClientSession
) -> None:
    engine.status = 503
    agent = make_agent(engine, session, dialect="vllm_v1")
    got = agent.build_report(await agent.scraper.scrape())
    assert not got.healthy and got.stale and "HTTP 503" in got.error
    assert got.scraped_at_unix_ms == 0 and not got.HasField("prefix_hit_rate")
    assert got.dialect == agent_pb2.METRIC_DIALECT_VLLM_V1  # from --dialect
    assert got.engine_kind == agent_pb2.ENGINE_KIND_VLLM


async def test_the_agent_streams_reports_marks_a_dead_engine_stale_and_leaves(
    engine: EngineStub, session: aiohttp.ClientSession, controlplane: ControlPlaneStub
) -> None:
    engine.serve("vllm_v1_a")
    agent = make_agent(engine, session, controlplane.target)
    task = asyncio.create_task(agent.run())
    service = controlplane.service
    await wait_until(lambda: len(service.of("n1")) >= 3)
    fresh = service.of("n1")[-1]
    assert fresh.healthy and not fresh.stale and fresh.running == 7.0
    await engine.close()  # the engine stops answering
    await wait_until(lambda: service.of("n1")[-1].stale)
    stale = service.of("n1")[-1]
    assert not stale.healthy and stale.error
    # The old scrape time: that of the last report from a live engine (another may have come
    # after ``fresh`` was read, before the engine stopped).
    last_fresh = [r for r in service.of("n1") if not r.stale][-1]
    assert fresh.scraped_at_unix_ms <= stale.scraped_at_unix_ms <= last_fresh.sent_at_unix_ms
    assert (stale.running, stale.waiting, stale.kv_usage) == (7.0, 3.0, fresh.kv_usage)
    assert not stale.HasField("prefix_hit_rate")
    agent.stop()
    await asyncio.wait_for(task, 5)
    last = service.of("n1")[-1]
    assert last.leaving and last.stale
    seqs = [r.seq for r in service.of("n1")]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize("name", ["sim", "vllm_v1", "sglang_colon"])
async def test_reports_carry_the_engines_cumulative_ttft_histogram(
    name: str, engine: EngineStub, session: aiohttp.ClientSession
) -> None:
    got = await two_scrape_report(name, engine, session)
    assert got.HasField("ttft")
    assert got.ttft.count >= 10 and got.ttft.sum > 0
    assert len(got.ttft.upper_bounds) == len(got.ttft.counts) > 0
    assert got.ttft.counts[-1] <= got.ttft.count


async def test_a_llamacpp_report_has_no_ttft(
    engine: EngineStub, session: aiohttp.ClientSession
) -> None:
    agent = make_agent(engine, session)
    engine.serve("llamacpp")
    got = agent.build_report(await agent.scraper.scrape())
    assert got.healthy and not got.HasField("ttft")
