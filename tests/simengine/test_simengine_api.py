"""The simulated engine's completions API on a real aiohttp server (port 0), with a real client:
completions and chat, streamed and not, and the requests it refuses."""

from __future__ import annotations

import time

import aiohttp
import pytest

from sim.engine_model import LLAMA_8B, LLAMA_70B
from simengine.server import EngineOptions, EngineServer
from tests.support.simengine_http import PROMPT, post, stream, text_of


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
