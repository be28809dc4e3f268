"""The simulated engine's HTTP API on a real aiohttp server (port 0), with a real client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from agents import dialects
from agents.exposition import parse
from sim.engine_model import LLAMA_8B, LLAMA_70B
from simengine.server import EngineOptions, EngineServer

PROMPT = "You are a helpful support assistant for ACME. " * 20  # 940 bytes: 15 blocks
SPEEDUP = 20.0


@pytest.fixture
async def server() -> AsyncIterator[EngineServer]:
    options = EngineOptions(
        profile=LLAMA_8B.with_overrides(kv_blocks=2000), model="sim-8b", speedup=SPEEDUP
    )
    srv = EngineServer("127.0.0.1:0", options)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(client: aiohttp.ClientSession, url: str, body: object) -> tuple[int, dict[str, Any]]:
    async with client.post(url, data=json.dumps(body)) as response:
        return response.status, await response.json()


async def stream(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[float], bool]:
    """The parsed SSE chunks, the arrival time of each, and whether [DONE] ended the stream."""
    chunks: list[dict[str, Any]] = []
    times: list[float] = []
    done = False
    async with client.post(url, json={**body, "stream": True}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line:
                continue
            assert line.startswith("data: ")
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                done = True
                continue
            chunks.append(json.loads(payload))
            times.append(time.monotonic())
    return chunks, times, done


def text_of(chunks: list[dict[str, Any]], chat: bool) -> str:
    return "".join(
        choice["delta"].get("content", "") if chat else choice["text"]
        for chunk in chunks
        for choice in chunk["choices"]
    )


async def test_completion_returns_max_tokens_words_and_vllm_usage(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    status, body = await post(
        client,
        f"{server.url}/v1/completions",
        {"model": "sim-8b", "prompt": PROMPT, "max_tokens": 7},
    )
    assert status == 200
    assert body["object"] == "text_completion"
    assert body["model"] == "sim-8b"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["text"].split()) == 7
    usage = body["usage"]
    assert usage["prompt_tokens"] == -(-len(PROMPT.encode()) // 4)  # ≈ 4 bytes per token
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_chat_completion_renders_messages_and_answers_as_assistant(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    status, body = await post(
        client, f"{server.url}/v1/chat/completions", {"messages": messages, "max_tokens": 3}
    )
    assert status == 200
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert len(message["content"].split()) == 3
    rendered = "system: be brief\nuser: hello\n"
    assert body["usage"]["prompt_tokens"] == -(-len(rendered) // 4)


async def test_max_completion_tokens_is_read_for_chat(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4}
    status, answer = await post(client, f"{server.url}/v1/chat/completions", body)
    assert status == 200
    assert answer["usage"]["completion_tokens"] == 4


async def test_streamed_completion_sends_every_token_then_usage_then_done(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    chunks, _, done = await stream(
        client,
        f"{server.url}/v1/completions",
        {"prompt": PROMPT, "max_tokens": 6, "stream_options": {"include_usage": True}},
    )
    assert done
    *content, last = chunks
    assert [c["object"] for c in content] == ["text_completion"] * len(content)
    assert len(content) == 6  # stream interval 0: one chunk per decode step
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert len(text_of(content, chat=False).split()) == 6
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 6


async def test_streamed_chat_starts_with_the_assistant_role_and_omits_usage_by_default(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    chunks, _, done = await stream(
        client,
        f"{server.url}/v1/chat/completions",
        {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4},
    )
    assert done
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "role" not in chunks[1]["choices"][0]["delta"]
    assert all("usage" not in c for c in chunks)
    assert len(text_of(chunks, chat=True).split()) == 4


async def test_first_chunk_waits_for_the_simulated_prefill(
    client: aiohttp.ClientSession,
) -> None:
    options = EngineOptions(profile=LLAMA_70B, model="m", speedup=1.0)
    srv = EngineServer("127.0.0.1:0", options)
    await srv.start()
    try:
        tokens = 4000
        prefill_s = (
            LLAMA_70B.prefill_overhead_ms + LLAMA_70B.prefill_chunk_ms(tokens, tokens)
        ) / 1000.0
        started = time.monotonic()
        chunks, times, _ = await stream(
            client,
            f"{srv.url}/v1/completions",
            {
                "prompt": "x",
                "max_tokens": 3,
                "cacheroute": {"blocks": list(range(1, 251)), "prompt_tokens": tokens},
            },
        )
    finally:
        await srv.stop()
    assert len(chunks) == 3
    # Lower bounds only: the engine sleeps through each modelled step (≈ 0.3 s of prefill). It
    # keeps the cumulative timeline, not each gap: a step that woke late (a busy CPU) is followed
    # by catch-up steps without sleep, so two tokens may arrive together, never early overall.
    decode_s = LLAMA_70B.decode_base_ms / 1000.0
    assert times[0] - started >= 0.9 * prefill_s
    assert times[-1] - started >= prefill_s + 2 * decode_s - 0.002  # 2 ms of timer slack


async def test_cached_tokens_rise_on_a_repeated_prefix(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/completions"
    first = (await post(client, url, {"prompt": PROMPT, "max_tokens": 2}))[1]
    again = (await post(client, url, {"prompt": PROMPT, "max_tokens": 2}))[1]
    shared = PROMPT[:640] + "a different question entirely, with its own words in it"
    partial = (await post(client, url, {"prompt": shared, "max_tokens": 2}))[1]
    prompt_tokens = first["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # Every block is cached; vLLM still computes the last prompt token.
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt_tokens - 1
    # The first 640 bytes are 10 full 64-byte blocks of 16 tokens.
    assert partial["usage"]["prompt_tokens_details"]["cached_tokens"] == 160


async def test_extension_blocks_give_exact_token_counts_and_hits(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/completions"
    ext = {"blocks": [11, 12, 13, 14], "prompt_tokens": 60, "output_tokens": 5}
    first = (await post(client, url, {"prompt": "ignored", "cacheroute": ext}))[1]
    assert first["usage"]["prompt_tokens"] == 60
    assert first["usage"]["completion_tokens"] == 5  # output_tokens overrides max_tokens
    ext2 = {"blocks": [11, 12, 13, 99], "prompt_tokens": 64}
    second = (await post(client, url, {"prompt": "ignored", "cacheroute": ext2}))[1]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 48
    assert second["usage"]["completion_tokens"] == 16  # the default max_tokens


async def test_token_id_prompts_count_one_token_per_id(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/completions"
    ids = list(range(100, 150))
    first = (await post(client, url, {"prompt": ids, "max_tokens": 1}))[1]
    again = (await post(client, url, {"prompt": [ids], "max_tokens": 1}))[1]
    assert first["usage"]["prompt_tokens"] == 50
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 49


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


async def test_reset_prefix_cache_forgets_cached_blocks(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    url = f"{server.url}/v1/completions"
    await post(client, url, {"prompt": PROMPT, "max_tokens": 1})
    async with client.post(f"{server.url}/reset_prefix_cache") as response:
        assert response.status == 200
        assert await response.json() == {"reset": True}
    after = (await post(client, url, {"prompt": PROMPT, "max_tokens": 1}))[1]
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_reset_prefix_cache_is_refused_while_requests_run(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    body = {"prompt": PROMPT, "max_tokens": 500, "stream": True}
    async with client.post(f"{server.url}/v1/completions", json=body) as running:
        await running.content.readline()
        status, error = await post(client, f"{server.url}/reset_prefix_cache", {})
        running.close()
    assert status == 409
    assert "in flight" in error["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", [1, 2], None),
        ("/v1/completions", {"prompt": ""}, "prompt"),
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "a", "max_tokens": "9"}, "max_tokens"),
        ("/v1/completions", {"prompt": "a", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "a", "stream": "yes"}, "stream"),
        ("/v1/completions", {"prompt": "a", "stream_options": []}, "stream_options"),
        ("/v1/completions", {"prompt": "a", "cacheroute": {"blocks": []}}, "cacheroute"),
        (
            "/v1/completions",
            {"prompt": "a", "cacheroute": {"blocks": [1, 2], "prompt_tokens": 64}},
            "cacheroute",
        ),
        ("/v1/completions", {"prompt": "a", "cacheroute": {"blocks": [-1]}}, "cacheroute"),
        ("/v1/completions", {"prompt": "a", "cacheroute": {"blocks": [1], "x": 1}}, "cacheroute"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 40000}, "max_tokens"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "messages"),
    ],
)
async def test_malformed_requests_get_400_with_an_openai_error(
    server: EngineServer,
    client: aiohttp.ClientSession,
    path: str,
    body: object,
    param: str | None,
) -> None:
    status, error = await post(client, f"{server.url}{path}", body)
    assert status == 400
    assert error["error"]["code"] == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["param"] == param
    assert error["error"]["message"]


async def test_invalid_json_gets_400(server: EngineServer, client: aiohttp.ClientSession) -> None:
    async with client.post(f"{server.url}/v1/completions", data=b"{not json") as response:
        assert response.status == 400
        assert "not valid JSON" in (await response.json())["error"]["message"]


async def test_an_unknown_model_gets_404(
    server: EngineServer, client: aiohttp.ClientSession
) -> None:
    status, error = await post(
        client, f"{server.url}/v1/completions", {"model": "gpt-9", "prompt": "a"}
    )
    assert status == 404
    assert error["error"]["param"] == "model"


async def test_stream_interval_coalesces_tokens_into_fewer_chunks(
    client: aiohttp.ClientSession,
) -> None:
    options = EngineOptions(profile=LLAMA_8B, model="m", speedup=1.0, stream_interval_s=0.05)
    srv = EngineServer("127.0.0.1:0", options)
    await srv.start()
    try:
        chunks, _, done = await stream(
            client, f"{srv.url}/v1/completions", {"prompt": PROMPT, "max_tokens": 40}
        )
    finally:
        await srv.stop()
    assert done
    assert len(text_of(chunks, chat=False).split()) == 40
    assert len(chunks) < 20  # 40 steps of ≈ 6.5 ms in ≈ 0.26 s, at most one chunk per 50 ms
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


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
