"""agents.scraper against a real HTTP engine stub: good scrapes, restarts, failures → stale."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from agents.agent_metrics import AgentMetrics, NodeMetrics
from agents.scraper import Scraper
from tests.support.agents import EngineStub, engine, sample

__all__ = ["engine"]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def node_metrics() -> NodeMetrics:
    return AgentMetrics().for_node("n1")


def scraper_for(
    engine: EngineStub, session: aiohttp.ClientSession, metrics: NodeMetrics, **kw: object
) -> Scraper:
    return Scraper(
        f"{engine.url}/metrics",
        session,
        timeout_s=float(kw.pop("timeout_s", 1.0)),  # type: ignore[arg-type]
        metrics=metrics,
        **kw,  # type: ignore[arg-type]
    )


def scrapes(metrics: NodeMetrics, result: str) -> float:
    value = metrics.families.registry.get_sample_value(
        "cacheroute_agent_scrapes_total", {"node_id": "n1", "result": result}
    )
    return value or 0.0


async def test_a_good_scrape_is_fresh_and_healthy(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    engine.serve("vllm_v1_a")
    state = await scraper_for(engine, session, node_metrics).scrape()
    assert state.healthy and not state.stale and state.error == ""
    assert state.sample is not None and state.sample.running == 7.0
    assert state.scraped_at_unix_ms > 0
    assert scrapes(node_metrics, "ok") == 1


async def test_a_counter_reset_between_scrapes_gives_no_rate(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    scraper = scraper_for(engine, session, node_metrics)
    engine.serve("vllm_v1_b")
    await scraper.scrape()
    engine.serve("vllm_v1_restarted")
    state = await scraper.scrape()
    assert state.healthy and state.rates.reset
    assert state.rates.prefix_hit_rate is None
    assert state.rates.prompt_tokens_per_s == 0.0
    assert state.rates.generation_tokens_per_s == 0.0
    resets = node_metrics.families.registry.get_sample_value(
        "cacheroute_agent_counter_resets_total", {"node_id": "n1"}
    )
    assert resets == 1


async def test_an_engine_that_stops_answering_is_stale_with_its_old_values(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    scraper = scraper_for(engine, session, node_metrics)
    engine.serve("sglang_colon_a")
    good = await scraper.scrape()
    await engine.close()
    state = await scraper.scrape()
    assert not state.healthy and state.stale
    assert "GET" in state.error
    assert state.scraped_at_unix_ms == good.scraped_at_unix_ms
    assert state.sample == good.sample  # old load, not zero load
    assert state.rates.prefix_hit_rate is None
    assert scrapes(node_metrics, "unreachable") == 1


async def test_the_first_good_scrape_after_an_outage_covers_the_gap(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    scraper = scraper_for(engine, session, node_metrics)
    engine.serve("sim_a")
    await scraper.scrape()
    engine.status = 503
    failed = await scraper.scrape()
    assert not failed.healthy and "HTTP 503" in failed.error
    engine.status = 200
    engine.serve("sim_b")
    state = await scraper.scrape()
    assert state.healthy and not state.stale
    assert state.rates.prefix_hit_rate == pytest.approx(0.75)


async def test_a_slow_engine_times_out(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    engine.serve("vllm_v1_a")
    engine.delay_s = 0.4
    state = await scraper_for(engine, session, node_metrics, timeout_s=0.1).scrape()
    assert not state.healthy and state.stale and "timed out" in state.error
    assert scrapes(node_metrics, "timeout") == 1


async def test_a_page_without_engine_metrics_is_unhealthy_not_idle(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    engine.body = "process_start_time_seconds 1.7e9\n"
    state = await scraper_for(engine, session, node_metrics).scrape()
    assert not state.healthy and state.stale and state.sample is None
    assert state.scraped_at_unix_ms == 0
    assert scrapes(node_metrics, "unrecognised") == 1


async def test_malformed_text_is_a_failed_scrape(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    engine.body = 'vllm:num_requests_running{engine="0" 4\n'
    state = await scraper_for(engine, session, node_metrics).scrape()
    assert not state.healthy and "malformed" in state.error
    assert scrapes(node_metrics, "malformed") == 1


async def test_the_scraper_asks_for_the_classic_text_format(
    engine: EngineStub, session: aiohttp.ClientSession, node_metrics: NodeMetrics
) -> None:
    engine.body = sample("sglang_colon_a")
    state = await scraper_for(engine, session, node_metrics, dialect="sglang").scrape()
    assert engine.accept.startswith("text/plain;version=0.0.4")
    assert state.healthy
    assert state.sample is not None and state.sample.block_size == 16
