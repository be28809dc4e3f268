"""Acceptance of the front under load: warm keys follow the plan, a killed engine fails nothing
that had not started streaming, and the in-flight count is the truth (also after disconnects)."""

from __future__ import annotations

import asyncio
from collections import Counter

import openai
import pytest

from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.server import RouterConfig, RouterServer
from sim.engine_model import DEFAULT_PROFILE
from tests.dataplane.http_front.conftest import SimEngines, front_url, running_front
from tests.dataplane.http_front.metrics_util import in_flight, metric_sum, node_load
from tests.support.factories import small_plan, store_plan
from tests.support.openai_clients import openai_client
from tests.support.router import rollout, warm_keys
from tests.support.router_core import table_for
from tests.support.streams import streams_through_a_kill
from tests.support.timing import StartDeadline

pytestmark = [pytest.mark.redis, pytest.mark.grpc]
MODEL = DEFAULT_PROFILE  # simengine serves its profile's name
MESSAGES = [{"role": "user", "content": "a question about the shared context"}]


def client(server: RouterServer) -> openai.AsyncOpenAI:
    return openai_client(f"{front_url(server)}/v1", timeout=120)


async def _until(check: object, timeout_s: float = 20.0) -> None:
    assert callable(check)
    with StartDeadline(timeout_s) as deadline:  # patience (tests/support/timing.py)
        while not check():
            if deadline.expired():
                pytest.fail(f"condition not met in {deadline.describe()}")
            await asyncio.sleep(0.02)


async def test_warm_keys_go_where_the_active_plan_says(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    table = small_plan(nodes=4, keys=20)
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        generation = await rollout(stores, await store_plan(stores, table))
        await _until(lambda: server.router.pools["default"].table_generation == generation)
        api = client(server)
        keys = warm_keys(table)
        assert keys
        for key in keys:
            raw = await api.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=MESSAGES,
                max_tokens=2,
                extra_headers={"x-cacheroute-key": key},
            )
            members = table.destination_ids(hash_key(key))
            assert members is not None
            assert raw.headers["x-cacheroute-node"] in members, key
            assert raw.headers["x-cacheroute-reason"] == "warm"
            assert raw.headers["x-cacheroute-version"] == table.version
            assert raw.headers["x-cacheroute-generation"] == str(generation)


async def test_killing_an_engine_fails_no_request_that_had_not_started_streaming(
    redis_url: str, stores: Stores, engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, engines.addresses) as server:
        api = client(server)
        started, failures = await streams_through_a_kill(
            api, MODEL, MESSAGES, lambda: engines.kill(2)
        )
        assert len(started) == 80
        unstarted = [f for f in failures if not f[0]]
        assert unstarted == []
        assert metric_sum(server, "cacheroute_router_http_retries_total", cause="connect") > 0
        await _until(lambda: in_flight(server) == {})


async def test_a_client_that_disconnects_mid_stream_frees_its_in_flight_count(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(server)
        raw = await api.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=20_000, stream=True
        )
        node = raw.headers["x-cacheroute-node"]
        stream = raw.parse()
        got = 0
        async for _chunk in stream:
            got += 1
            if got == 3:
                break
        assert in_flight(server) == {node: 1.0}
        assert node_load(server)[node] == 1.0
        await stream.close()  # the client goes away mid-stream
        await _until(lambda: in_flight(server) == {})
        assert node_load(server)[node] == 0.0
        assert metric_sum(server, "cacheroute_router_http_client_disconnects_total") == 1


async def test_in_flight_per_node_equals_the_open_requests_at_quiet_points(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    async with running_front(redis_url, stores, shared_engines.addresses) as server:
        api = client(server)
        open_streams: list[tuple[str, object]] = []
        for index in range(16):  # long streams, each read until its first chunk
            raw = await api.chat.completions.with_raw_response.create(
                model=MODEL, messages=MESSAGES, max_tokens=20_000, stream=True,
                extra_body={"prompt_cache_key": f"k{index}"},
            )  # fmt: skip
            stream = raw.parse()
            await stream.__anext__()
            open_streams.append((raw.headers["x-cacheroute-node"], stream))

        def truth() -> dict[str, float]:
            return {n: float(c) for n, c in Counter(n for n, _ in open_streams).items()}

        # quiet point 1: 16 open streams, plus short requests that came and went
        done = await asyncio.gather(
            *(api.completions.create(model=MODEL, prompt=f"short {i}", max_tokens=2)
              for i in range(12))
        )  # fmt: skip
        assert len(done) == 12
        assert in_flight(server) == truth()
        assert {n: v for n, v in node_load(server).items() if v} == truth()
        # quiet point 2: close every other stream (client disconnects)
        for _, stream in open_streams[::2]:
            await stream.close()  # type: ignore[attr-defined]
        open_streams = open_streams[1::2]
        await _until(lambda: in_flight(server) == truth())
        assert {n: v for n, v in node_load(server).items() if v} == truth()
        # quiet point 3: none open
        for _, stream in open_streams:
            await stream.close()  # type: ignore[attr-defined]
        open_streams = []
        await _until(lambda: in_flight(server) == {})
        assert set(node_load(server).values()) == {0.0}


async def test_the_session_token_header_comes_back_and_brings_the_next_turn_to_its_node(
    redis_url: str, stores: Stores, shared_engines: SimEngines
) -> None:
    """cacheroute_online over real HTTP: the response's x-session-token, echoed on the next turn,
    sends it to the named node (reason session); a forged header routes as if there were none."""
    table = small_plan(nodes=4, keys=20)
    router = {"policy": "cacheroute_online"}
    async with running_front(redis_url, stores, shared_engines.addresses, router=router) as server:
        generation = await rollout(stores, await store_plan(stores, table))
        await _until(lambda: server.router.pools["default"].table_generation == generation)
        api = client(server)
        key = warm_keys(table)[0]
        first = await api.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=2, extra_headers={"x-cacheroute-key": key}
        )
        token = first.headers["x-session-token"]
        assert token.startswith("s1.")
        other = next(n for n in server.router.pools["default"].view.nodes.ids
                     if n != first.headers["x-cacheroute-node"])  # fmt: skip
        from dataplane.core.session_token import encode  # noqa: PLC0415

        moved = encode("default", other, generation)
        second = await api.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=2,
            extra_headers={"x-cacheroute-key": key, "x-session-token": moved},
        )  # fmt: skip
        assert (second.headers["x-cacheroute-node"], second.headers["x-cacheroute-reason"]) == (
            other, "session",
        )  # fmt: skip
        assert second.headers["x-session-token"] == moved
        forged = await api.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=2,
            extra_headers={"x-cacheroute-key": key, "x-session-token": moved[:-2] + "00"},
        )  # fmt: skip
        assert forged.status_code == 200
        assert forged.headers["x-cacheroute-reason"] == "warm"


@pytest.mark.parametrize("policy", ["cacheroute_conversation", RouterConfig().policy])
async def test_an_sdk_conversation_stays_on_one_member_without_a_token_on_every_router(
    redis_url: str, stores: Stores, shared_engines: SimEngines, policy: str
) -> None:
    """Conversation affinity (the default policy, cacheroute_balanced, and the one-bound
    cacheroute_conversation) over real HTTP with the real openai client and no token echoed:
    every turn of a chat lands on one member of its key's set, on two routers alike (the second
    has never seen the conversation), while different conversations of the key spread over the
    members (issue 30)."""
    assert RouterConfig().policy == "cacheroute_balanced"  # the router's default
    table = table_for({"acme": [f"node-{i}" for i in range(4)]}, [f"node-{i}" for i in range(4)])
    router = {"policy": policy}
    system = {"role": "system", "content": "You are ACME's assistant. " * 20}
    async with (
        running_front(redis_url, stores, shared_engines.addresses, router=router) as one,
        running_front(redis_url, stores, shared_engines.addresses, router=router) as two,
    ):
        generation = await rollout(stores, await store_plan(stores, table))
        for server in (one, two):
            await _until(lambda s=server: s.router.pools["default"].table_generation == generation)
        homes = set()
        for conversation in range(8):
            messages = [system, {"role": "user", "content": f"question {conversation}"}]
            seen = set()
            for turn in range(3):
                api = client(one if turn % 2 == 0 else two)
                raw = await api.chat.completions.with_raw_response.create(
                    model=MODEL, messages=messages, max_tokens=2,
                    extra_headers={"x-cacheroute-key": "acme"},
                )  # fmt: skip
                assert raw.headers["x-cacheroute-reason"] in ("warm", "session")
                seen.add(raw.headers["x-cacheroute-node"])
                answer = raw.parse().choices[0].message.content or ""
                messages = [*messages, {"role": "assistant", "content": answer},
                            {"role": "user", "content": f"follow-up {turn}"}]  # fmt: skip
            assert len(seen) == 1, (conversation, seen)
            homes |= seen
        assert len(homes) >= 2  # 8 conversations over 4 members: not all on one
