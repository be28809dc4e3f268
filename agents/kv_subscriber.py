"""One engine's KV-event subscription: ZMQ SUB, sequence checking, replay of missed batches.

Frames arrive as ``[topic, seq, payload]`` (:mod:`agents.kv_wire`). The sequence must grow by one:

* a jump (``seq > last + 1``, also the first batch when it is not seq 0) is a gap: the
  subscriber asks the engine's replay socket (a ZMQ ROUTER; vLLM's ``replay_endpoint``) for every
  buffered batch from ``last + 1`` (request ``[b"", start seq]`` on a DEALER, answers
  ``[b"", seq, payload]`` until seq -1) and applies them in order. A gap the replay cannot fill
  (no replay socket, a timeout, the buffer no longer reaches back) is *unrecovered*: the block set
  is cleared, since removals may have been lost and a stale "resident" is worse than a miss, and
  rebuilds from later events;
* ``seq <= last`` on the live socket is a publisher restart (its counter starts again at 0): the
  block set is cleared (a restarted engine's cache is empty); batches seen again after a replay
  are skipped as duplicates instead.

Garbage (undecodable msgpack, wrong frame count, a bad seq frame) and frames above
``max_frame_bytes`` are counted by reason and dropped, never raised. Memory is bounded by the
socket's receive high-water mark (queued batches), ``max_frame_bytes`` (checked before decoding;
ZMQ's own ``MAXMSGSIZE`` at 4x drops anything larger before it is buffered) and the block set's
bound. ZMQ reconnects by itself after the engine goes away, so nothing here dials again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass

import structlog
import zmq
import zmq.asyncio

from agents.kv_wire import SEQ_BYTES, WireError, decode_batch, parse_seq
from agents.residency import DEFAULT_MAX_BLOCKS, Residency

log = structlog.get_logger("agents.kv_events")

DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
RECEIVE_HWM = 10_000  # batches queued in the SUB socket before ZMQ drops (then: a gap)


@dataclass(frozen=True)
class SubscriberConfig:
    """Where an engine publishes and the subscriber's bounds."""

    endpoint: str  # e.g. tcp://127.0.0.1:5557
    replay_endpoint: str | None = None
    topic: bytes = b""
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_blocks: int = DEFAULT_MAX_BLOCKS
    replay_timeout_s: float = 2.0


class KvEventSubscriber:
    """Feeds one engine's :class:`Residency` from its KV events (module docstring)."""

    def __init__(
        self, config: SubscriberConfig, *, context: zmq.asyncio.Context | None = None
    ) -> None:
        self.config = config
        self.residency = Residency(config.max_blocks)
        self._context = context or zmq.asyncio.Context.instance()
        self.last_seq = -1
        self._dup_until = -1  # live batches up to here were already applied from a replay
        self.batches = 0
        self.replayed = 0
        self.gaps = 0
        self.gaps_unrecovered = 0
        self.restarts = 0
        self.skipped_events = 0
        self.dropped: Counter[str] = Counter()  # reason -> frames dropped

    @property
    def seen(self) -> bool:
        """A batch was applied: the residency describes the engine (else the report omits it)."""
        return self.batches > 0

    async def run(self) -> None:
        """Receive until cancelled."""
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sub.setsockopt(zmq.MAXMSGSIZE, 4 * self.config.max_frame_bytes)
        sub.setsockopt(zmq.SUBSCRIBE, self.config.topic)
        sub.connect(self.config.endpoint)
        log.info("kv_events_subscribed", endpoint=self.config.endpoint)
        try:
            while True:
                frames = await sub.recv_multipart(copy=True)
                await self.receive(frames)
        finally:
            sub.close(linger=0)

    async def receive(self, frames: list[bytes]) -> None:
        """One live multipart message: check its sequence, replay a gap, apply it."""
        if len(frames) != 3:
            self.dropped["frames"] += 1
            return
        try:
            seq = parse_seq(frames[1])
        except WireError as exc:
            self.dropped[exc.reason] += 1
            return
        if seq < 0:
            self.dropped["bad_seq"] += 1
            return
        if seq <= self._dup_until:
            return
        self._dup_until = -1
        if seq <= self.last_seq:
            self.restarts += 1
            log.info("kv_events_publisher_restarted", seq=seq, last_seq=self.last_seq)
            self.residency.clear()
            self.last_seq = -1
        if seq > self.last_seq + 1:
            await self._fill_gap(seq)
            if self.last_seq >= seq:
                return
        self._apply(seq, frames[2])

    def _apply(self, seq: int, payload: bytes) -> None:
        self.last_seq = seq
        if len(payload) > self.config.max_frame_bytes:
            self.dropped["oversize"] += 1
            return
        try:
            batch = decode_batch(payload)
        except WireError as exc:
            self.dropped[exc.reason] += 1
            return
        self.residency.apply(batch.events)
        self.skipped_events += batch.skipped
        self.batches += 1

    async def _fill_gap(self, seq: int) -> None:
        """Replay from ``last_seq + 1``; clear the block set when the gap stays open."""
        self.gaps += 1
        wanted = self.last_seq + 1
        if self.config.replay_endpoint is not None:
            with contextlib.suppress(zmq.ZMQError):
                await self._replay(wanted)
            if self.last_seq >= seq - 1:
                self._dup_until = self.last_seq
                return
        self.gaps_unrecovered += 1
        log.info("kv_events_gap_unrecovered", wanted=wanted, got=seq, applied=self.last_seq)
        self.residency.clear()
        self.last_seq = seq - 1

    async def _replay(self, start: int) -> None:
        """Ask the replay socket for batches from ``start`` and apply those that continue ours."""
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, 4 * self.config.max_frame_bytes)
        assert self.config.replay_endpoint is not None
        sock.connect(self.config.replay_endpoint)
        try:
            await sock.send_multipart([b"", start.to_bytes(SEQ_BYTES, "big")])
            timeout_ms = int(self.config.replay_timeout_s * 1000)
            while await sock.poll(timeout_ms):
                frames = await sock.recv_multipart(copy=True)
                if len(frames) != 3 or frames[0] != b"":
                    self.dropped["frames"] += 1
                    continue
                try:
                    seq = parse_seq(frames[1])
                except WireError as exc:
                    self.dropped[exc.reason] += 1
                    continue
                if seq < 0:
                    return  # the end marker
                if seq == self.last_seq + 1:
                    self._apply(seq, frames[2])
                    self.replayed += 1
        finally:
            sock.close(linger=0)


async def run_forever(subscriber: KvEventSubscriber) -> None:
    """:meth:`KvEventSubscriber.run`, restarted after an unexpected error (logged)."""
    while True:
        try:
            await subscriber.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a socket error must not end the agent; the block set stays
            log.exception("kv_events_subscriber_failed", endpoint=subscriber.config.endpoint)
            await asyncio.sleep(1.0)
