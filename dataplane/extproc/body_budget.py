"""The bytes all of a router's ext_proc streams may hold while they wait for a body's end.

A stream whose key is in the body holds the body until its end of stream. Each stream was capped
(``--extproc-max-body``), the sum was not: 20 streams of 15 MiB without end of stream took a
router from 109 to 729 MiB. Every buffered chunk now takes its bytes from one budget
(``--extproc-max-buffered``); a chunk that does not fit ends its stream with a 503 (the gateway
answers it; the client may retry), and a stream gives its bytes back when it decides, fails or
ends. A stream that waits too long for its body's end gets a 408 (``--extproc-body-timeout``,
:mod:`dataplane.extproc.service`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class BodyBudget:
    """Bytes taken by every stream's buffered body, at most ``limit`` in all."""

    def __init__(self, limit: int, registry: CollectorRegistry) -> None:
        self.limit = limit
        self.used = 0
        self._gauge = Gauge(
            "cacheroute_router_extproc_buffered_bytes",
            "Request body bytes ext_proc streams hold while waiting for the body's end.",
            registry=registry,
        )
        self.refused = Counter(
            "cacheroute_router_extproc_buffer_refusals",
            "Streams ended with a 503 because every stream's buffered bodies filled the budget.",
            registry=registry,
        )

    def take(self, size: int) -> bool:
        """Take ``size`` bytes; False (nothing taken) when they do not fit."""
        if self.used + size > self.limit:
            self.refused.inc()
            return False
        self.used += size
        self._gauge.set(self.used)
        return True

    def give(self, size: int) -> None:
        self.used = max(0, self.used - size)
        self._gauge.set(self.used)
