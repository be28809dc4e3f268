"""The simulated engine's operational endpoints: metrics in its simulated dialect, health and
models, and the slowdown knob."""

from __future__ import annotations

import time

import aiohttp
import pytest

from agents import dialects
from agents.exposition import parse
from sim.engine_model import LLAMA_8B
from simengine.server import EngineOptions, EngineServer
from tests.support.simengine_http import PROMPT, SPEEDUP, post


async def test_metrics_parse_as_the_simulated_dialect_with_matching_counters(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/completions"
    usages = [(await post(client, url, {"prompt": PROMPT, "max_tokens": 3}))[1]["usage"]]
    usages.append((await post(client, url, {"prompt": PROMPT, "max_tokens": 3}))[1]["usage"])
    async with client.get(f"{server.url}/metrics") as response:
        assert response.status == 200
        text = await response.text()
        content_type = response.headers["Content-Type"]
    sample = dialects.decode(parse(text, content_type, dialects.wanted))
    assert sample.dialect == dialects.SIMULATED
    assert sample.kind == dialects.KIND[dialects.SIMULATED]
    assert sample.model == "sim-8b"
    assert (sample.running, sample.waiting, sample.kv_usage) == (0, 0, 0)
    assert sample.prefix_queries == sum(u["prompt_tokens"] for u in usages)
    assert sample.prefix_hits == sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert sample.prompt_tokens == sample.prefix_queries
    assert sample.generation_tokens == 6
    assert sample.block_size == 16
    assert sample.kv_capacity_tokens == 2000 * 16
    assert sample.process_start == pytest.approx(server.engine.started_at_unix)
    full = parse(text, content_type)
    assert full.sum("vllm:time_to_first_token_seconds_count") == 2
    assert full.sum(dialects.SIM_MARKER) == 1


async def test_metrics_show_running_and_waiting_requests(client: aiohttp.ClientSession) -> None:
    # max_running 1: the second request waits while the first decodes.
    profile = LLAMA_8B.with_overrides(kv_blocks=2000, max_running=1)
    srv = EngineServer("127.0.0.1:0", EngineOptions(profile=profile, model="m", speedup=1.0))
    await srv.start()
    try:
        body = {"prompt": PROMPT, "max_tokens": 200, "stream": True}
        async with (
            client.post(f"{srv.url}/v1/completions", json=body) as one,
            client.post(f"{srv.url}/v1/completions", json=body) as two,
        ):
            await one.content.readline()
            async with client.get(f"{srv.url}/metrics") as response:
                sample = dialects.decode(parse(await response.text(), "", dialects.wanted))
            assert (sample.running, sample.waiting) == (1, 1)
            assert sample.kv_usage > 0
            one.close()
            two.close()
    finally:
        await srv.stop()


async def test_health_and_models(server: EngineServer, client: aiohttp.ClientSession) -> None:
    async with client.get(f"{server.url}/health") as response:
        assert response.status == 200
    async with client.get(f"{server.url}/v1/models") as response:
        models = await response.json()
    assert [m["id"] for m in models["data"]] == ["sim-8b"]
    assert models["data"][0]["max_model_len"] == 2000 * 16


async def test_the_slowdown_knob_multiplies_step_time_and_is_exported(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/admin/slowdown"
    async with client.get(url) as response:
        assert await response.json() == {"factor": 1.0}
    factor = 40.0
    status, body = await post(client, url, {"factor": factor})
    assert (status, body) == (200, {"factor": factor})
    started = time.monotonic()
    await post(client, f"{server.url}/v1/completions", {"prompt": PROMPT, "max_tokens": 1})
    took = time.monotonic() - started
    tokens = server.engine.stats.prompt_tokens
    modelled_s = LLAMA_8B.prefill_chunk_ms(tokens, tokens) / 1000 / SPEEDUP
    assert took >= factor * modelled_s * 0.99  # a lower bound: a busy host only adds to it
    async with client.get(f"{server.url}/metrics") as response:
        page = parse(await response.text())
    assert page.values("cacheroute_sim_slowdown") == [factor]


@pytest.mark.parametrize("body", [{"factor": 0}, {"factor": "x"}, {}, [1], {"factor": 1e9}])
async def test_a_bad_slowdown_is_refused_naming_the_field(
    server: EngineServer, client: aiohttp.ClientSession, body: object
) -> None:
    status, error = await post(client, f"{server.url}/admin/slowdown", body)
    assert status == 400 and error["error"]["param"] == "factor"
    assert server.engine.slowdown == 1.0
