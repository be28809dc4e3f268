"""The front's Prometheus counters, on the router's registry (served at ``--metrics-listen``)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter


class FrontMetrics:
    """Requests by route and status, retries by cause, upstream failures, client disconnects."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "cacheroute_router_http_requests",
            "HTTP front requests by route and the status answered (engine's or the front's).",
            ["route", "status"],
            registry=registry,
        )
        self.retries = Counter(
            "cacheroute_router_http_retries",
            "Requests retried on a second engine, by the first attempt's failure: connect, "
            "5xx or timeout (always before the first byte reached the client).",
            ["cause"],
            registry=registry,
        )
        self.upstream_failures = Counter(
            "cacheroute_router_http_upstream_failures",
            "Engine attempts that failed (connect, 5xx, timeout, or broken mid-stream).",
            ["cause"],
            registry=registry,
        )
        self.client_gone = Counter(
            "cacheroute_router_http_client_disconnects",
            "Responses abandoned by their client mid-way (the engine request was cancelled).",
            registry=registry,
        )

        self._answered: dict[tuple[str, int], Any] = {}

    def answered(self, route: str, status: int) -> None:
        child = self._answered.get((route, status))
        if child is None:  # label lookups cost µs: keep each (route, status) child
            child = self._answered[(route, status)] = self.requests.labels(route, str(status))
        child.inc()
