"""Per-client token buckets: how many of a caller's requests count for planning.

A router counts every decision's key for the control plane's rate estimates (the next plan's hot
keys). With ``--planning-rate-limit R`` each client gets a bucket of ``R`` tokens per second
holding at most ``max(1, R)`` (one second's worth): a request that finds a token counts, one that
finds none is still routed but not counted. So one caller cannot make its keys the next plan's
top keys by sending more than its share.

Bounded memory: at most ``max_clients`` buckets; a new client past that first drops the buckets
that are full again (idle clients), then the oldest. Pure: ``now`` is the caller's clock.
"""

from __future__ import annotations


class ClientBuckets:
    """Token buckets keyed by client name (module docstring)."""

    __slots__ = ("_buckets", "burst", "max_clients", "rate")

    def __init__(self, rate: float, *, max_clients: int = 10_000) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        if max_clients < 1:
            raise ValueError(f"max_clients must be >= 1, got {max_clients}")
        self.rate = rate
        self.burst = max(1.0, rate)
        self.max_clients = max_clients
        self._buckets: dict[str, list[float]] = {}  # client → [tokens, at]

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, client: str, now: float, wanted: int = 1) -> int:
        """Take up to ``wanted`` tokens for ``client`` at ``now``; how many it got."""
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= self.max_clients:
                self._evict(now)
            bucket = self._buckets[client] = [self.burst, now]
        else:
            tokens, at = bucket
            bucket[0] = min(self.burst, tokens + max(0.0, now - at) * self.rate)
            bucket[1] = now
        granted = min(wanted, int(bucket[0]))
        bucket[0] -= granted
        return granted

    def _evict(self, now: float) -> None:
        rate, burst = self.rate, self.burst
        full = [
            c for c, (tokens, at) in self._buckets.items() if (now - at) * rate >= burst - tokens
        ]
        for client in full:
            del self._buckets[client]
        while len(self._buckets) >= self.max_clients:
            del self._buckets[next(iter(self._buckets))]
