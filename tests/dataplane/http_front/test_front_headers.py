"""Request hygiene of the HTTP front: the headers engines and tracing expect reach the engine
unchanged, key headers are honoured in order and counted, /v1/embeddings and /v1/responses pass
through, and the front measures each answer (TTFT, end to end, cached tokens)."""

from __future__ import annotations

import json

import aiohttp
import pytest

from cacheroute_state import Stores
from dataplane.http_front.proxy import FORWARD_REQUEST_HEADERS
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS
from tests.dataplane.http_front.conftest import front_url, running_front
from tests.dataplane.http_front.metrics_util import metric_sum
from tests.support.engines import recording_engine

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": "vendor=opaque,other=1",
    "X-Request-Id": "req-42",
    "X-data-parallel-rank": "3",
    "Authorization": "Bearer sk-test",
    "Accept": "application/json",
}


async def test_trace_request_id_and_rank_headers_reach_the_engine_unchanged(
    redis_url: str, stores: Stores
) -> None:
    assert {h.lower() for h in TRACE} <= {h.lower() for h in FORWARD_REQUEST_HEADERS}
    async with (
        recording_engine() as (address, seen),
        running_front(redis_url, stores, [address]) as server,
        aiohttp.ClientSession() as http,
    ):
        headers = {**TRACE, "X-Not-Forwarded": "secret"}
        async with http.post(
            f"{front_url(server)}/v1/chat/completions", json=CHAT, headers=headers
        ) as answer:
            assert answer.status == 200
        [(path, got, body)] = seen.requests
        assert path == "/v1/chat/completions"
        assert json.loads(body) == CHAT
        for name, value in TRACE.items():
            assert got.get(name) == value, name
        assert "X-Not-Forwarded" not in got


async def test_each_key_header_is_honoured_in_order_and_counted(
    redis_url: str, stores: Stores
) -> None:
    async with (
        recording_engine() as (address, _),
        running_front(redis_url, stores, [address]) as server,
        aiohttp.ClientSession() as http,
    ):
        url = f"{front_url(server)}/v1/chat/completions"
        names = list(DEFAULT_KEY_HEADERS)
        for first in range(len(names)):
            headers = {name: f"key-{i}" for i, name in enumerate(names) if i >= first}
            async with http.post(url, json={**CHAT, "prompt_cache_key": "p"}, headers=headers):
                pass
        async with http.post(url, json={**CHAT, "prompt_cache_key": "p"}):
            pass
        async with http.post(url, json=CHAT):
            pass
        for name in [*names, "prompt_cache_key", "derived"]:
            count = metric_sum(
                server, "cacheroute_router_key_source_total", door="http", source=name
            )
            assert count == 1, name


async def test_embeddings_and_responses_pass_through_on_the_same_routing_rules(
    redis_url: str, stores: Stores
) -> None:
    async with (
        recording_engine(cached_tokens=24) as (address, seen),
        running_front(redis_url, stores, [address]) as server,
        aiohttp.ClientSession() as http,
    ):
        for path, body in (
            ("/v1/embeddings", {"model": "m", "input": "embed this"}),
            ("/v1/responses", {"model": "m", "input": "answer this", "prompt_cache_key": "t"}),
        ):
            async with http.post(f"{front_url(server)}{path}", json=body) as answer:
                assert answer.status == 200
                assert (await answer.json())["path"] == path
                assert answer.headers["x-cacheroute-node"] == "node-0"
        assert [p for p, _, _ in seen.requests] == ["/v1/embeddings", "/v1/responses"]
        async with http.post(f"{front_url(server)}/v1/embeddings", json={"model": "m"}) as bad:
            assert bad.status == 400
            assert (await bad.json())["error"]["param"] == "input"
        labels = {"door": "http", "pool": "default", "model": "m"}
        assert metric_sum(server, "cacheroute_router_ttft_seconds_count", **labels) == 2
        assert metric_sum(server, "cacheroute_router_request_seconds_count", **labels) == 2
        assert metric_sum(server, "cacheroute_router_cached_tokens_sum", **labels) == 48
        assert metric_sum(server, "cacheroute_router_key_source_total", source="derived") == 1
