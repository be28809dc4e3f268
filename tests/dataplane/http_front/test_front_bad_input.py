"""Bad input never reaches an engine: a 4xx with an OpenAI-style error naming the problem."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from cacheroute_state import Stores
from tests.dataplane.http_front.conftest import SimEngines, front_url, running_front
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def _post(url: str, data: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/v1/chat/completions",
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as response,
    ):
        return response.status, await response.json(content_type=None)


@pytest.mark.parametrize(
    ("data", "headers", "status", "words"),
    [
        (b"{not json", {}, 400, "not valid JSON"),
        (b"[1, 2]", {}, 400, "JSON object"),
        (b'{"messages": "x"}', {}, 400, "'messages'"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', {}, 400, "stream"),
        (None, {"x-cacheroute-key": "k" * 513}, 400, "513 bytes; the limit is 512"),
        (None, {"x-cacheroute-key": "~mine"}, 400, "reserved"),
        (None, {"x-cacheroute-pool": "Not A Pool"}, 400, "pool"),
        (None, {"x-cacheroute-pool": "nosuchpool"}, 404, "'nosuchpool' is not known"),
        (b"x" * 5000, {}, 413, "the limit is 4096 bytes"),
    ],
)
async def test_bad_requests_are_refused_before_any_engine(
    redis_url: str,
    stores: Stores,
    shared_engines: SimEngines,
    data: bytes | None,
    headers: dict[str, str],
    status: int,
    words: str,
) -> None:
    body = data if data is not None else json.dumps(CHAT).encode()
    async with running_front(
        redis_url, stores, shared_engines.addresses, max_body_bytes=4096
    ) as server:
        got, answer = await _post(front_url(server), body, headers)
        assert got == status
        error = answer["error"]
        assert words in error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        assert metric_sum(server, "cacheroute_router_decisions_total") == 0  # nothing routed
        assert in_flight(server) == {}


async def test_no_eligible_engine_is_an_openai_style_503(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        view = server.router.pools["default"].view
        view.panic_threshold = 0.0  # no panic routing: with it every undrained engine is eligible
        view.set_states(healthy=[False] * 4)
        got, answer = await _post(
            front_url(server), b'{"messages": [{"role": "u", "content": "x"}]}'
        )
        assert got == 503
        assert answer["error"]["code"] == "no_eligible_engine"
        assert "no healthy, undrained destination" in answer["error"]["message"]


async def test_a_100000_deep_json_body_is_a_400_not_a_500(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    """Issue 23, failure 8: the parser's recursion ran out and the front answered 500."""
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with running_front(
        redis_url, stores, shared_engines.addresses, max_body_bytes=1 << 20
    ) as server:
        got, answer = await _post(front_url(server), deep)
        assert got == 400
        assert "nests too deeply" in answer["error"]["message"]
        assert metric_sum(server, "cacheroute_router_decisions_total") == 0


@pytest.mark.parametrize("header", ["x-cacheroute-key", "x-cacheroute-pool"])
async def test_a_routing_header_that_is_not_utf8_is_a_400_naming_it(
    redis_url: str, stores: Stores, shared_engines: SimEngines, header: str
) -> None:
    """Issue 23, failure 8: bytes that are not UTF-8 in the key or pool header were a 500.
    A raw socket sends them: HTTP clients refuse to."""
    body = json.dumps(CHAT).encode()
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        assert server.http is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http.port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n" + header.encode() + b": caf\xe9\xff\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400")
        error = json.loads(payload)["error"]
        assert error["param"] == header and "not valid UTF-8" in error["message"]
        assert metric_sum(server, "cacheroute_router_decisions_total") == 0
