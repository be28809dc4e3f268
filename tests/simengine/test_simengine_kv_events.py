"""The simulated engine publishes vLLM's KV events: read here with raw ZMQ sockets and a generic
msgpack decoder (vLLM's documented layout, not the agents' reader), on a real engine (port 0)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio

from dataplane.core.keys import prompt_blocks
from sim.engine_model import LLAMA_8B
from simengine.server import EngineOptions, EngineServer

WAIT_MS = 20_000
PROMPT = "You are the support assistant of ACME; answer briefly and politely. " * 8


@pytest.fixture
async def server() -> AsyncIterator[EngineServer]:
    options = EngineOptions(
        profile=LLAMA_8B.with_overrides(kv_blocks=64), model="m", speedup=50.0, kv_events_port=0
    )
    srv = EngineServer("127.0.0.1:0", options)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def complete(url: str, prompt: str) -> None:
    body = {"model": "m", "prompt": prompt, "max_tokens": 2}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/completions", data=json.dumps(body)) as response,
    ):
        assert response.status == 200, await response.text()


async def next_batch(sub: zmq.asyncio.Socket) -> tuple[int, list[Any]]:
    assert await sub.poll(WAIT_MS), "no KV event batch arrived"
    topic, seq, payload = await sub.recv_multipart()
    assert topic == b"" and len(seq) == 8
    batch = msgspec.msgpack.decode(payload)
    assert isinstance(batch, list) and isinstance(batch[0], float)  # array_like EventBatch
    return int.from_bytes(seq, "big"), batch[1]


def subscriber(endpoint: str) -> zmq.asyncio.Socket:
    sub = zmq.asyncio.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    return sub


async def stored_and_removed(sub: zmq.asyncio.Socket, want: set[int]) -> tuple[set[int], set[int]]:
    """Read batches until every block of ``want`` was stored; what was stored and removed."""
    stored: set[int] = set()
    removed: set[int] = set()
    while not want <= stored:
        _, events = await next_batch(sub)
        for event in events:
            if event[0] == "BlockStored":
                assert event[2] is None and event[4] == 16  # parent, block_size
                stored.update(event[1])
            elif event[0] == "BlockRemoved":
                removed.update(event[1])
    return stored, removed


async def test_a_request_stores_its_prompt_blocks_and_other_traffic_evicts_them(
    server: EngineServer,
) -> None:
    assert server.kv_events is not None
    sub = subscriber(server.kv_events.endpoint)
    try:
        blocks = set(prompt_blocks(PROMPT))
        for _ in range(50):  # a SUB socket joins asynchronously: send until the first batch
            await complete(server.url, PROMPT)
            if await sub.poll(200):
                break
        stored, _ = await stored_and_removed(sub, blocks)
        assert blocks <= stored
        removed: set[int] = set()
        for i in range(12):  # 12 other prompts of 9 blocks each overflow the 64-block cache
            other = f"tenant {i} has a different system prompt entirely. " * 10
            await complete(server.url, other)
            _, gone = await stored_and_removed(sub, set(prompt_blocks(other)))
            removed |= gone
        assert blocks & removed, "other traffic never evicted the first prompt's blocks"
    finally:
        sub.close(linger=0)


async def test_reset_publishes_all_blocks_cleared_and_replay_returns_the_buffer(
    server: EngineServer,
) -> None:
    assert server.kv_events is not None
    await complete(server.url, PROMPT)
    await complete(server.url, PROMPT + " and one more line")
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.url}/reset_prefix_cache") as response,
    ):
        assert response.status == 200
    dealer = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(server.kv_events.replay_endpoint)
    try:
        await dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        seqs: list[int] = []
        last: list[Any] = []
        while True:
            assert await dealer.poll(WAIT_MS)
            empty, seq, payload = await dealer.recv_multipart()
            assert empty == b""
            if int.from_bytes(seq, "big", signed=True) == -1:
                break
            seqs.append(int.from_bytes(seq, "big"))
            last = msgspec.msgpack.decode(payload)[1]
        assert seqs == list(range(len(seqs))) and len(seqs) >= 2
        assert last == [["AllBlocksCleared"]]
    finally:
        dealer.close(linger=0)


async def test_without_the_flag_the_engine_has_no_publisher() -> None:
    options = EngineOptions(profile=LLAMA_8B.with_overrides(kv_blocks=64), model="m")
    srv = EngineServer("127.0.0.1:0", options)
    assert srv.kv_events is None
    assert type(srv.engine.node.cache).__name__ == "PrefixCache"
