"""The NodeReport stream of one agent to the control plane (``AgentService.Connect``).

- The agent :meth:`~Reporter.offer`\\ s each new report; only the newest unsent one is kept (a
  stale report is worth nothing once a fresher one exists), so a slow or absent control plane
  never blocks scraping.
- Every report carries the node's identity, so the first report written on any stream joins
  (or re-joins) the node. ``seq`` counts reports over the agent's life, starting at 1: it goes on
  across reconnects, so the control plane can tell a resumed agent and count lost reports.
- A directive's ``report_interval_ms`` is adopted (clamped to 50 ms .. 60 s); its planned-key
  ``watch`` (at most 1,024 keys) replaces the last one when ``watch_version`` is set.
- When the stream fails or the server ends it, a new channel and stream are opened after an
  exponential backoff with jitter (0.2 s doubling to 5 s, each delay × U(0.5, 1)); the backoff
  resets once a stream has stayed up for a second or a directive arrives.
- :meth:`~Reporter.close` sends the final report with ``leaving = true``, half-closes the stream
  and waits briefly for the server to end it.
- Several control-plane addresses (and a DNS name that resolves to several, re-resolved on each
  reconnect) are tried in turn: every instance accepts reports, so after a lost or refused stream
  the agent moves to the next address instead of waiting for one instance (the dead leader) to
  come back. With TLS the certificate is still checked against the configured host name.
- With a token (``--token-file`` / ``$CACHEROUTE_TOKEN``) every stream carries
  ``authorization: Bearer TOKEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

import grpc
import structlog

from agents.agent_metrics import NodeMetrics
from agents.dialing import Backoff, dial, resolve_targets
from cacheroute.v1 import agent_pb2, agent_pb2_grpc
from servekit.waiting import wait_event

MAX_WATCH = 1024  # planned keys a directive may ask about (the control plane's bound)
MAX_WATCH_VERSION = 64
MIN_INTERVAL_MS = 50
MAX_INTERVAL_MS = 60_000

log = structlog.get_logger("agents.reporter")


class Reporter:
    """Owns the stream of one agent: :meth:`start`, :meth:`offer` reports, :meth:`close`."""

    def __init__(
        self,
        target: str | Sequence[str],
        *,
        metrics: NodeMetrics,
        credentials: grpc.ChannelCredentials | None = None,
        backoff: Backoff | None = None,
        stable_after_s: float = 1.0,
        close_timeout_s: float = 2.0,
        token: str | None = None,
    ) -> None:
        self.targets = [target] if isinstance(target, str) else list(target)
        if not self.targets:
            raise ValueError("a reporter needs at least one control-plane address")
        self.target = self.targets[0]  # the address in use (or tried last)
        self._attempt = 0
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._metrics = metrics
        self._credentials = credentials
        self._backoff = backoff or Backoff()
        self._stable_after_s = stable_after_s
        self._close_timeout_s = close_timeout_s
        self._log = log.bind(node_id=metrics.node_id)
        self._latest: agent_pb2.NodeReport | None = None
        self._pending = False
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._final: agent_pb2.NodeReport | None = None
        self._task: asyncio.Task[None] | None = None
        self.seq = 0  # seq of the last report written
        self.interval_ms: int | None = None  # adopted from the control plane
        self.draining = False
        # (plan version, (key hash, anchor block) pairs): planned keys whose prefix residency
        # the KV-event subscriber answers for (agents/residency_report.py)
        self.watch: tuple[str, tuple[tuple[int, int], ...]] | None = None
        self.connected = False
        self.ever_sent = False
        self.leaving_sent = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"reporter:{self._metrics.node_id}")

    def offer(self, report: agent_pb2.NodeReport) -> None:
        """Queue ``report`` as the next one to send, replacing an unsent older one."""
        self._latest = report
        self._pending = True
        self._wake.set()

    async def close(self, final: agent_pb2.NodeReport | None = None) -> None:
        """Send ``final`` with leaving = true (if the node ever joined), then end the stream."""
        if final is not None:
            self._final = agent_pb2.NodeReport()
            self._final.CopyFrom(final)
            self._final.leaving = True
        self._closing.set()
        self._wake.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self._close_timeout_s + 1.0)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        try:
            while not self._closing.is_set():
                if self._latest is None:
                    await self._wait_wake()
                    continue
                was_open, reason = await self._stream()
                if self._closing.is_set():
                    break
                self._metrics.reconnects.inc()
                delay = round(self._backoff.next_delay(), 3)
                if was_open:  # one warning per outage; refused attempts are only info
                    self._log.warning("controlplane_stream_lost", error=reason, retry_in_s=delay)
                else:
                    self._log.info("controlplane_unavailable", error=reason, retry_in_s=delay)
                await wait_event(self._closing, delay)
            if self._final is not None and self.ever_sent and not self.leaving_sent:
                with contextlib.suppress(TimeoutError):  # one last try to say goodbye
                    await asyncio.wait_for(self._stream(), self._close_timeout_s)
        finally:
            self._set_connected(False)

    async def _wait_wake(self) -> None:
        await self._wake.wait()
        self._wake.clear()

    async def _stream(self) -> tuple[bool, str]:
        """One stream, until it is lost or the reporter closes: (was it open, why it ended)."""
        channel = await self._open_channel()
        call = agent_pb2_grpc.AgentServiceStub(channel).Connect(metadata=self._metadata)
        reader = asyncio.create_task(self._read(call))
        opened = time.monotonic()
        self._pending = self._latest is not None  # the newest report (re)joins the node at once
        was_open = False
        try:
            while True:
                self._wake.clear()
                if self._closing.is_set():
                    await self._finish(call, reader)
                    return was_open, ""
                if self._pending:
                    await self._write(call, self._take())
                    was_open = True
                    if time.monotonic() - opened >= self._stable_after_s:
                        self._backoff.reset()
                waker = asyncio.create_task(self._wake.wait())
                await asyncio.wait({waker, reader}, return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
                if reader.done():
                    error = None if reader.cancelled() else reader.exception()
                    return was_open, _describe(error) if error else "the server ended the stream"
        except (grpc.RpcError, asyncio.InvalidStateError) as exc:
            return was_open, _describe(exc)
        finally:
            self._set_connected(False)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                await reader
            call.cancel()
            await channel.close(grace=None)

    async def _candidates(self) -> list[tuple[str, str]]:
        """(address to dial, configured host) for every address, names resolved to each IP."""
        return await resolve_targets(self.targets)

    async def _open_channel(self) -> grpc.aio.Channel:
        """A channel to the next candidate address (round robin over reconnects)."""
        candidates = await self._candidates()
        address, host = candidates[self._attempt % len(candidates)]
        self._attempt += 1
        self.target = address
        self._log = self._log.bind(controlplane=address)
        return dial(address, host, self._credentials)

    def _take(self) -> agent_pb2.NodeReport:
        assert self._latest is not None
        self._pending = False
        return self._latest

    async def _write(
        self,
        call: grpc.aio.StreamStreamCall[agent_pb2.NodeReport, agent_pb2.AgentDirective],
        report: agent_pb2.NodeReport,
    ) -> None:
        message = agent_pb2.NodeReport()
        message.CopyFrom(report)
        message.seq = self.seq + 1
        message.sent_at_unix_ms = time.time_ns() // 1_000_000
        await call.write(message)
        self.seq = message.seq
        self.ever_sent = True
        self._metrics.reports.inc()
        if not self.connected:
            self._set_connected(True)
            self._log.info("controlplane_stream_open", seq=self.seq)

    async def _finish(
        self,
        call: grpc.aio.StreamStreamCall[agent_pb2.NodeReport, agent_pb2.AgentDirective],
        reader: asyncio.Task[None],
    ) -> None:
        if self._final is not None and self.ever_sent:
            await self._write(call, self._final)
            self.leaving_sent = True
            self._log.info("controlplane_leaving_sent", seq=self.seq)
        await call.done_writing()
        with contextlib.suppress(TimeoutError, grpc.RpcError):
            await asyncio.wait_for(asyncio.shield(reader), self._close_timeout_s)

    async def _read(
        self, call: grpc.aio.StreamStreamCall[agent_pb2.NodeReport, agent_pb2.AgentDirective]
    ) -> None:
        async for directive in call:
            self._apply(directive)

    def _apply(self, directive: agent_pb2.AgentDirective) -> None:
        self._backoff.reset()
        if directive.report_interval_ms:
            interval = min(max(directive.report_interval_ms, MIN_INTERVAL_MS), MAX_INTERVAL_MS)
            if interval != self.interval_ms:
                self._log.info("report_interval_adopted", interval_ms=interval)
            self.interval_ms = interval
        if directive.draining != self.draining:
            self._log.info("drain_state", draining=directive.draining)
        self.draining = directive.draining
        if directive.message:
            self._log.info("controlplane_message", message=directive.message)
        if directive.watch_version:
            pairs = tuple((w.key_hash, w.anchor_block) for w in directive.watch[:MAX_WATCH])
            self.watch = (directive.watch_version[:MAX_WATCH_VERSION], pairs)

    def _set_connected(self, connected: bool) -> None:
        self.connected = connected
        self._metrics.connected.set(1 if connected else 0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__
