"""Retries before the first byte, never after: real HTTP servers that fail in each way."""

from __future__ import annotations

import pytest

from cacheroute_state import Stores
from tests.dataplane.http_front.conftest import SimEngines, front_url, running_front
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum
from tests.support.engines import BODY, failing_engine, post_raw

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
STREAM_BODY = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true}'


@pytest.mark.parametrize(("mode", "cause"), [("500", "5xx"), ("hang", "timeout")])
async def test_a_failure_before_the_first_byte_is_retried_once_on_another_engine(
    redis_url: str, stores: Stores, shared_engines: SimEngines, mode: str, cause: str
) -> None:
    async with failing_engine(mode) as bad:
        # only the bad engine is eligible at first: the router's own decision must be it
        addresses = [bad, shared_engines.addresses[0]]
        async with running_front(redis_url, stores, addresses, first_byte_timeout_s=0.5) as server:
            view = server.router.pools["default"].view
            view.loads[1] = 1000.0  # p2c prefers the bad one (loads set as a snapshot would)
            status, headers, data = await post_raw(front_url(server), BODY)
            assert status == 200, data
            assert headers["x-cacheroute-node"] == "node-1"
            assert headers["x-cacheroute-retried-from"] == "node-0"
            assert b"choices" in data
            assert metric_sum(server, "cacheroute_router_http_retries_total", cause=cause) == 1
            assert in_flight(server) == {}


async def test_with_no_other_engine_the_engines_5xx_passes_through(
    redis_url: str, stores: Stores
) -> None:
    async with failing_engine("500") as bad, running_front(redis_url, stores, [bad]) as server:
        status, headers, data = await post_raw(front_url(server), BODY)
        assert status == 500
        assert b"engine overloaded" in data
        assert headers["x-cacheroute-node"] == "node-0"
        assert metric_sum(server, "cacheroute_router_http_retries_total") == 0


async def test_a_connect_error_with_nowhere_else_is_an_openai_style_502(
    redis_url: str, stores: Stores
) -> None:
    async with failing_engine("500") as bad:
        pass  # the port is free again: connections are refused
    async with running_front(redis_url, stores, [bad]) as server:
        status, _, data = await post_raw(front_url(server), BODY)
        assert status == 502
        assert b'"code":"engine_connect"' in data
        assert in_flight(server) == {}


async def test_nothing_is_retried_after_bytes_reached_the_client(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with failing_engine("cut") as bad:
        addresses = [bad, shared_engines.addresses[0]]
        async with running_front(redis_url, stores, addresses) as server:
            server.router.pools["default"].view.loads[1] = 1000.0
            status, headers, data = await post_raw(front_url(server), STREAM_BODY)
            assert status == 200
            assert headers["x-cacheroute-node"] == "node-0"
            assert b"par" in data and b"engine_mid_stream" in data  # an SSE error event last
            assert metric_sum(server, "cacheroute_router_http_retries_total") == 0
            mid = metric_sum(
                server, "cacheroute_router_http_upstream_failures_total", cause="mid_stream"
            )
            assert mid == 1
            assert in_flight(server) == {}


async def test_a_hung_engine_is_abandoned_at_its_own_observed_first_byte_time(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    """Issue 23: a hung engine held its requests for the whole 120 s first-byte timeout. With a
    10-minute cap, an engine seen answering in 10 ms is given up after the 0.2 s floor."""
    async with failing_engine("hang") as bad:
        addresses = [bad, shared_engines.addresses[0]]
        async with running_front(
            redis_url, stores, addresses, first_byte_timeout_s=600.0, first_byte_floor_s=0.2
        ) as server:
            assert server.http is not None
            for _ in range(8):  # what it answered in before it hung
                server.http.first_byte.observe("node-0", False, 0.01)
            assert server.http.first_byte.timeout_for("node-0", False) == 0.2
            assert server.http.first_byte.timeout_for("node-1", False) == 600.0
            view = server.router.pools["default"].view
            view.loads[1] = 1000.0  # p2c prefers the hung one
            status, headers, data = await post_raw(front_url(server), BODY)
            assert status == 200, data
            assert headers["x-cacheroute-retried-from"] == "node-0"
            assert metric_sum(server, "cacheroute_router_http_retries_total", cause="timeout") == 1
