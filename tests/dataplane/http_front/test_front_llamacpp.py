"""The front before two real llama.cpp engines: real tokens, a real prefix cache, real metrics.

Marked ``llamacpp``. It needs the cached ``llama-server`` build (``.venv/bin/python
scripts/build_llamacpp.py``, ≈ 4 min on 2 idle cores, cached under the user's cache directory);
with ``CACHEROUTE_BUILD_LLAMACPP=1`` the test builds it itself, otherwise it is skipped with the
command to run; under ``CACHEROUTE_REQUIRE_LLAMACPP=1`` (set by ``.ci/run`` after it built the
binary) a missing binary fails the test instead, so CI never skips it quietly. The model is
written at test time (``tests.support.llamacpp.write_model``).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import dialects, exposition
from cacheroute_state import Stores
from servekit.processes import free_port
from tests.dataplane.http_front.conftest import front_url, running_front
from tests.support.llamacpp import require_binary, start_server, wait_healthy, write_model
from tests.support.openai_clients import openai_client

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.redis, pytest.mark.grpc]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def llama_servers(tmp_path: Path) -> Iterator[list[str]]:
    binary = require_binary()
    model = write_model(tmp_path / "tiny.gguf")
    ports = [free_port(), free_port()]
    procs = [start_server(binary, model, p, tmp_path / f"llama-{p}.log") for p in ports]
    try:
        for port, proc in zip(ports, procs, strict=True):
            wait_healthy(port, proc)
        yield [f"127.0.0.1:{p}" for p in ports]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def _sample(address: str) -> dialects.EngineSample:
    """What the agent reads from the engine's /metrics (its own parser and auto-detection)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return dialects.decode(exposition.parse(text, wanted=dialects.wanted))


async def test_the_front_serves_real_tokens_and_a_real_prefix_cache(
    redis_url: str, stores: Stores, llama_servers: list[str]
) -> None:
    async with running_front(redis_url, stores, llama_servers) as server:
        api = openai_client(f"{front_url(server)}/v1")
        models = await api.models.list()
        assert [m.id for m in models.data] == ["tiny"]  # two engines, one model
        context = "a shared business context for every question. " * 12
        seen: set[str] = set()
        hits = 0
        for i in range(6):
            raw = await api.chat.completions.with_raw_response.create(
                model="tiny",
                messages=[{"role": "user", "content": f"{context} question {i}"}],
                max_tokens=8,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"prompt_cache_key": "acme", "ignore_eos": True},
            )
            node = raw.headers["x-cacheroute-node"]
            usage = None
            async for chunk in raw.parse():
                if chunk.usage is not None:
                    usage = chunk.usage
            assert usage is not None and usage.completion_tokens == 8
            details = usage.prompt_tokens_details
            cached = details.cached_tokens if details and details.cached_tokens else 0
            if node in seen:
                assert cached > len(context) // 2  # the shared context came from the cache
                hits += 1
            else:
                assert cached == 0
            seen.add(node)
        assert hits >= 4
        samples = [_sample(a) for a in llama_servers]
        assert {s.dialect for s in samples} == {dialects.LLAMACPP}
        assert sum(s.prefix_hits or 0 for s in samples) > 0
        assert sum(s.running + s.waiting for s in samples) == 0  # nothing open at the end
