"""The simulated engine's KV-cache events, published as vLLM publishes them.

vLLM's ``ZmqEventPublisher`` (``vllm/distributed/kv_events.py``): a ZMQ PUB socket sends
multipart ``[topic, seq, payload]`` with ``seq`` 8 bytes big-endian counting from 0 and
``payload`` the msgpack of a ``KVEventBatch``, msgspec Structs ``array_like`` with the event
class name as a tag (``["BlockStored", [hashes], parent, [token ids], block_size, lora_id,
medium]``). A ROUTER replay socket keeps the last ``buffer_steps`` batches: a client sends
``[b"", start seq]`` and gets ``[b"", seq, payload]`` for every buffered batch from there, then
``[b"", -1 (signed), b""]``. The structs below are a copy of vLLM's field order, so a vLLM
subscriber reads this engine and the agents read both.

The simulator has no token ids: ``token_ids`` is empty and ``block_size`` the profile's. Its block
hashes are the routers' chained prompt-block hashes (:mod:`dataplane.core.keys`), so the router
and the agent name a prefix's blocks alike on a simulated fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque

import msgspec
import structlog
import zmq
import zmq.asyncio

from sim.cache_impl import BlockCache
from simengine.observed_cache import ObservedPrefixCache

log = structlog.get_logger("simengine.kv_events")

DEFAULT_BUFFER_STEPS = 10_000  # vLLM's default replay buffer
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """vLLM's base class: the tag is the class name."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared
_ENCODER = msgspec.msgpack.Encoder()


class KvEventPublisher:
    """PUB + ROUTER replay sockets of one engine; :meth:`publish` is called after each step."""

    def __init__(
        self,
        host: str,
        *,
        port: int = 0,
        replay_port: int = 0,
        topic: str = "",
        buffer_steps: int = DEFAULT_BUFFER_STEPS,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self._context = context or zmq.asyncio.Context.instance()
        self._topic = topic.encode()
        self._seq = itertools.count()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay = self._context.socket(zmq.ROUTER)
        self._replay.setsockopt(zmq.LINGER, 0)
        self.endpoint = _bind(self._pub, host, port)
        self.replay_endpoint = _bind(self._replay, host, replay_port)
        self._task: asyncio.Task[None] | None = None
        self.published = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve_replay())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._pub.close(linger=0)
        self._replay.close(linger=0)

    def publish(self, events: list[Event]) -> int:
        """Send one batch (never blocks: PUB drops for a slow subscriber, whose gap replays)."""
        seq = next(self._seq)
        payload = _ENCODER.encode(EventBatch(ts=time.time(), events=events))
        self._buffer.append((seq, payload))
        with contextlib.suppress(zmq.Again):
            self._pub.send_multipart(
                [self._topic, seq.to_bytes(8, "big"), payload], flags=zmq.NOBLOCK
            )
        self.published += 1
        return seq

    def new_cache(self, capacity_blocks: int) -> ObservedPrefixCache:
        """The engine's cache, recording what the next batch must say."""
        return ObservedPrefixCache(capacity_blocks)

    def cleared(self) -> None:
        """The engine dropped every block (a cache reset)."""
        self.publish([AllBlocksCleared()])

    def after_step(self, cache: BlockCache, block_size: int) -> None:
        """The step's stored and evicted blocks, in order, as one batch (none: nothing sent)."""
        changes = cache.drain() if isinstance(cache, ObservedPrefixCache) else []
        if changes:
            self.publish(
                [
                    BlockStored(hashes, None, [], block_size, None, None)
                    if stored
                    else BlockRemoved(hashes, None)
                    for stored, hashes in changes
                ]
            )

    async def _serve_replay(self) -> None:
        sock = self._replay
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                continue  # not a replay request; a ROUTER must never fail on a client's bytes
            client, start = frames[0], int.from_bytes(frames[2], "big")
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await sock.send_multipart([client, b"", seq.to_bytes(8, "big"), payload])
            await sock.send_multipart([client, b"", END_SEQ, b""])


def _bind(sock: zmq.asyncio.Socket, host: str, port: int) -> str:
    """Bind ``tcp://host:port`` (0: a free port) and return the endpoint clients dial."""
    shown = f"[{host}]" if ":" in host else host
    if ":" in host:
        sock.setsockopt(zmq.IPV6, 1)
    sock.bind(f"tcp://{shown}:{port if port else '*'}")
    bound = sock.getsockopt(zmq.LAST_ENDPOINT)
    assert isinstance(bound, bytes)
    return bound.decode()
