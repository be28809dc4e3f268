"""KV events for the agents' tests, encoded here from vLLM's documented layout
(``../shared/docs/CALIBRATION.md`` §3) with plain msgpack, independently of any publisher under
test; a test publisher (XPUB + a replaying ROUTER) on real ZMQ sockets; waiting helpers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from agents.kv_subscriber import KvEventSubscriber
from tests.support.polling import eventually

ENC = msgspec.msgpack.encode


def stored(*hashes: Any, medium: str | None = "GPU", extra: bool = False) -> list[Any]:
    event: list[Any] = ["BlockStored", list(hashes), None, [1, 2, 3], 16, None, medium]
    return [*event, "a field from a newer vLLM"] if extra else event


def removed(*hashes: Any) -> list[Any]:
    return ["BlockRemoved", list(hashes), "GPU"]


def batch(*events: Any) -> bytes:
    return ENC([1700000000.5, list(events), 0])


async def until(condition: Callable[[], bool]) -> None:
    async def check() -> bool:
        return condition()

    await eventually(check, timeout=30.0)


def seq(n: int) -> bytes:
    return n.to_bytes(8, "big")


class Engine:
    """A test publisher: an XPUB socket and a ROUTER that replays what ``buffer`` holds."""

    def __init__(self) -> None:
        ctx = zmq.asyncio.Context.instance()
        self.pub = ctx.socket(zmq.XPUB)  # a PUB that tells when a subscriber has joined
        self.pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = self._bind(self.pub)
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.replay_endpoint = self._bind(self.router)
        self.buffer: dict[int, bytes] = {}
        self.replays: list[int] = []

    @staticmethod
    def _bind(sock: zmq.asyncio.Socket) -> str:
        sock.bind("tcp://127.0.0.1:*")
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(endpoint, bytes)
        return endpoint.decode()

    async def serve_replay(self) -> None:
        while True:
            client, _, start_frame = await self.router.recv_multipart()
            start = int.from_bytes(start_frame, "big")
            self.replays.append(start)
            for n in sorted(self.buffer):
                if n >= start:
                    await self.router.send_multipart([client, b"", seq(n), self.buffer[n]])
            end = (-1).to_bytes(8, "big", signed=True)
            await self.router.send_multipart([client, b"", end, b""])

    async def send(self, n: int, payload: bytes, *, live: bool = True) -> None:
        self.buffer[n] = payload
        if live:
            await self.pub.send_multipart([b"", seq(n), payload])

    def close(self) -> None:
        self.pub.close(linger=0)
        self.router.close(linger=0)


@contextlib.asynccontextmanager
async def running(sub: KvEventSubscriber) -> AsyncIterator[KvEventSubscriber]:
    task = asyncio.create_task(sub.run())
    try:
        yield sub
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def joined(engine: Engine, sub: KvEventSubscriber) -> None:
    """Publish seq 0 once the SUB socket has joined (ZMQ connects asynchronously)."""
    assert await engine.pub.poll(30_000), "the subscriber never joined"
    assert await engine.pub.recv() == b"\x01"  # subscribe to every topic
    await engine.send(0, batch(stored(100)))
    await until(lambda: sub.seen)
