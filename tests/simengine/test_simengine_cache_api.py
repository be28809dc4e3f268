"""The simulated engine's prefix cache seen through its HTTP API: cached tokens on a repeated
prefix, exact counts for extension blocks and token-id prompts, and the cache reset."""

from __future__ import annotations

import aiohttp

from simengine.server import EngineServer
from tests.support.simengine_http import PROMPT, post


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
