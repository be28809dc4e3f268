"""The HTTP front with the real ``openai`` client, four real simulated engines and a real router."""

from __future__ import annotations

import openai
import pytest

from cacheroute_state import Stores
from dataplane.core.keys import MAX_PROMPT_BYTES, prompt_blocks
from tests.dataplane.http_front.conftest import SimEngines, front_url, node_ids, running_front
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum
from tests.support.openai_clients import openai_client
from tests.support.polling import eventually
from tests.support.router import load_snapshot

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


def client(url: str) -> openai.AsyncOpenAI:
    return openai_client(f"{url}/v1")


async def test_chat_completion_returns_the_engines_answer_with_decision_headers(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(front_url(server))
        models = await api.models.list()
        model = models.data[0].id
        raw = await api.chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "hello there"}],
            max_tokens=5,
            extra_headers={"x-cacheroute-key": "tenant-1"},
        )
        answer = raw.parse()
        assert answer.choices[0].message.content
        node = raw.headers["x-cacheroute-node"]
        direct = client(f"http://{shared_engines.addresses[int(node.split('-')[1])]}")
        same = await direct.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello there"}], max_tokens=5
        )
        assert answer.choices[0].message.content == same.choices[0].message.content
        assert answer.usage is not None and answer.usage.completion_tokens == 5
        assert raw.headers["x-cacheroute-node"] in node_ids()
        assert raw.headers["x-cacheroute-reason"] == "no_table"
        assert raw.headers["x-cacheroute-generation"] == "0"
        assert raw.headers["x-cacheroute-version"] == ""
        assert in_flight(server) == {}


async def test_streamed_chat_arrives_in_chunks_and_reports_cached_tokens(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(front_url(server))
        model = (await api.models.list()).data[0].id
        prompt = "a long shared context " * 40
        seen: set[str] = set()
        for _ in range(6):  # no table: p2c spreads them; a node seen before has the prefix
            raw = await api.chat.completions.with_raw_response.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"prompt_cache_key": "tenant-7"},
            )
            node = raw.headers["x-cacheroute-node"]
            texts, usage = [], None
            async for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].delta.content:
                    texts.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
            assert len(texts) >= 2  # token chunks, not one buffered body
            assert usage is not None and usage.completion_tokens == 8
            details = usage.prompt_tokens_details
            cached = details.cached_tokens if details and details.cached_tokens else 0
            assert (cached > 0) == (node in seen), (node, seen, cached)
            seen.add(node)
        assert in_flight(server) == {}


async def test_completions_and_models_and_health(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(front_url(server))
        models = await api.models.list()
        assert len(models.data) == 1  # four engines, one model: the union has it once
        answer = await api.completions.create(model=models.data[0].id, prompt="hi", max_tokens=3)
        assert answer.choices[0].text
        http = api._client  # the client's own httpx connection
        health = await http.get(f"{front_url(server)}/health")
        assert health.status_code == 200 and health.json()["eligible_engines"]["default"] == 4
        await api.chat.completions.create(
            model=models.data[0].id, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        name = "cacheroute_router_http_requests_total"
        assert metric_sum(server, name, route="completions", status="200") == 1
        assert metric_sum(server, name, route="chat_completions", status="200") == 1


async def test_health_is_503_when_no_engine_is_eligible(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses[:2]) as server:
        http = client(front_url(server))._client
        ids = node_ids(2)
        addresses = dict(zip(ids, shared_engines.addresses[:2], strict=True))
        drained = load_snapshot(
            dict.fromkeys(ids, 0.0), seq=2, draining=tuple(ids), addresses=addresses
        )
        await stores.cluster.publish_load(drained)
        view = server.router.pools["default"].view
        await eventually(lambda: _true(not view.eligible_nodes), timeout=10)
        health = await http.get(f"{front_url(server)}/health")
        assert health.status_code == 503
        assert health.json()["status"] == "no_eligible_engine"
        assert health.json()["eligible_engines"] == {"default": 0}


async def _true(value: bool) -> bool:
    return value


async def test_engine_4xx_passes_through_unchanged(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(front_url(server))
        with pytest.raises(openai.NotFoundError) as caught:
            await api.chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "x"}]
            )
        assert "no-such-model" in str(caught.value)  # the engine's own message
        assert caught.value.response.headers["x-cacheroute-node"] in node_ids()
        assert metric_sum(server, "cacheroute_router_http_retries_total") == 0


@pytest.mark.parametrize("policy", ["preble", "sglang"])
async def test_prefix_history_policies_and_the_trace_get_the_prompts_chained_blocks(
    redis_url: str, stores: Stores, shared_engines: SimEngines, policy: str
) -> None:
    router = {"policy": policy, "sample_rate": 1.0}
    async with running_front(redis_url, stores, shared_engines.addresses, router=router) as server:
        api = client(front_url(server))
        model = (await api.models.list()).data[0].id
        content = "shared system prompt " * 400  # 8 KB: only the first 4 KiB are hashed
        raw = await api.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": content}], max_tokens=2
        )
        reasons = {"explore", "history", "cache_miss", "cache_match", "balance"}
        assert raw.headers["x-cacheroute-reason"] in reasons
        (sample,) = server.sampler.drain()
        expected = prompt_blocks(f"user: {content}\n".encode()[:MAX_PROMPT_BYTES])
        assert tuple(sample.prefix_blocks) == expected
        assert len(expected) == MAX_PROMPT_BYTES // 64
        assert sample.key.startswith("~d2.")  # no key given: derived from model + prompt head
