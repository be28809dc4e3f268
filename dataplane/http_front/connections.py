"""Connection hygiene of the HTTP front: who may hold a connection, and for how long.

One client once held 1,100 half-open connections (0 of 900 were ever closed); under a 1,024
open-file limit that starved the whole process, so new gRPC ``Route`` calls timed out and HTTP
requests hung for as long as they were held. The rules:

* **Caps.** At most ``per_client`` connections from one client address and ``total`` in all; a
  connection over either is closed as soon as it is accepted (counted, logged once a minute).
* **Time limits.** A new connection must deliver its first request's headers within
  ``header_timeout_s``; a keep-alive connection idle (or sending its next request's headers) for
  ``idle_timeout_s`` is closed (aiohttp's keep-alive timer); a body must arrive within
  ``body_timeout_s`` (:mod:`dataplane.http_front.app`, 408).
* **File-descriptor budget** (:func:`fd_budget`): the soft ``RLIMIT_NOFILE`` is raised to the
  hard limit at start where allowed (a warning where the result stays low); ``total`` is capped
  at ``(soft limit - FD_RESERVE) / 2`` (each proxied request also holds an engine connection), so
  the HTTP side can never take the descriptors gRPC, Redis and the engines need.
* **Accept back-off.** When descriptors run out anyway, asyncio already pauses accepting for a
  second; :func:`quiet_accept_errors` turns its per-failure traceback into one warning line a
  minute.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from servekit.grpc_hygiene import open_file_limit

log = structlog.get_logger("dataplane.http_front.connections")
FD_RESERVE = 256  # gRPC, Redis, the metrics endpoint, logs, the table decoder's worker
WANTED_FDS = 65_536
LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class ConnectionLimits:
    per_client: int = 256
    total: int = 10_000
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    body_timeout_s: float = 60.0


def fd_budget(wanted: int = WANTED_FDS) -> int:
    """Raise the soft open-file limit towards ``wanted`` (up to the hard one); the soft limit."""
    soft = open_file_limit(wanted)
    if soft < 4 * FD_RESERVE * 2:
        log.warning(
            "low open-file limit: the HTTP front's connections are capped to fit it",
            soft=soft, http_connections=max(1, (soft - FD_RESERVE) // 2),
        )  # fmt: skip
    return soft


class ConnectionGuard:
    """Counts connections per client and in all, and closes those over a cap or a deadline."""

    def __init__(self, limits: ConnectionLimits, registry: CollectorRegistry) -> None:
        self.limits = limits
        self.total_cap = max(1, min(limits.total, (fd_budget() - FD_RESERVE) // 2))
        self.open: Tally[str] = Tally()
        self.open_total = 0
        self._waiting: dict[object, asyncio.TimerHandle] = {}  # transport → header deadline
        self._last_log = 0.0
        self.refused = Counter(
            "cacheroute_http_connections_refused",
            "HTTP connections closed at accept: over the per-client or the total cap.",
            ["reason"],
            registry=registry,
        )
        self.timed_out = Counter(
            "cacheroute_http_connections_timed_out",
            "HTTP connections closed for not sending a request's headers in time.",
            registry=registry,
        )
        gauge = Gauge(
            "cacheroute_http_connections_open", "Open HTTP connections.", registry=registry
        )
        gauge.set_function(lambda: self.open_total)

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for ``loop.create_server`` around aiohttp's own."""
        return lambda: _Guarded(inner(), self)

    def admit(self, client: str, transport: asyncio.BaseTransport) -> bool:
        reason = ""
        if self.open[client] >= self.limits.per_client:
            reason = "per_client"
        elif self.open_total >= self.total_cap:
            reason = "total"
        if reason:
            self.refused.labels(reason).inc()
            now = time.monotonic()
            if now - self._last_log >= LOG_EVERY_S:
                self._last_log = now
                log.warning(
                    "http connection refused: cap reached", reason=reason, client=client,
                    open_from_client=self.open[client], open_total=self.open_total,
                    per_client=self.limits.per_client, total=self.total_cap,
                )  # fmt: skip
            return False
        self.open[client] += 1
        self.open_total += 1
        loop = asyncio.get_running_loop()
        self._waiting[transport] = loop.call_later(
            self.limits.header_timeout_s, self._expire, transport
        )
        return True

    def request_started(self, transport: object) -> None:
        """A request's headers arrived on ``transport``: its header deadline is met."""
        handle = self._waiting.pop(transport, None)
        if handle is not None:
            handle.cancel()

    def release(self, client: str, transport: object) -> None:
        self.request_started(transport)
        self.open[client] -= 1
        if self.open[client] <= 0:
            del self.open[client]
        self.open_total -= 1

    def _expire(self, transport: Any) -> None:
        if self._waiting.pop(transport, None) is not None:
            self.timed_out.inc()
            transport.abort()


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol behind the guard's admission (delegates everything else)."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._client = ""
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._guard.admit(self._client, transport):
            transport.abort()  # type: ignore[attr-defined]
            return
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._guard.release(self._client, self._transport)
            self._transport = None
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """One warning line a minute instead of a traceback per failed accept (module docstring)."""
    previous = loop.get_exception_handler()
    last = [0.0]
    failures = [0]

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "accept" in str(context.get("message", "")) and isinstance(
            context.get("exception"), OSError
        ):
            failures[0] += 1
            now = time.monotonic()
            if now - last[0] >= LOG_EVERY_S:
                last[0] = now
                log.warning(
                    "accept failed; pausing accepts for a second",
                    error=str(context["exception"]), failures=failures[0],
                )  # fmt: skip
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
