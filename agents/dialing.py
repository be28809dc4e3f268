"""How a reporter reaches the control plane: reconnect backoff, address resolution, the channel.

Apart from the report stream (:mod:`agents.reporter`) so the dialling rules (a fresh channel per
stream, every resolved address tried in turn, TLS checked against the configured host name) read
on their own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
from collections.abc import Sequence

import grpc

# A fresh channel is opened per stream, so gRPC's own reconnect backoff (up to 120 s by default)
# never delays a reconnect; the bounds below only matter inside one channel.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    ("grpc.enable_retries", 0),
)


class Backoff:
    """Exponential backoff with jitter: ``min(cap, base · 2^n) · U(0.5, 1)`` for failure n."""

    def __init__(
        self, base_s: float = 0.2, cap_s: float = 5.0, rng: random.Random | None = None
    ) -> None:
        if base_s <= 0 or cap_s < base_s:
            raise ValueError(f"backoff needs 0 < base ({base_s}) <= cap ({cap_s})")
        self.base_s, self.cap_s = base_s, cap_s
        self._rng = rng or random.Random()
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return delay * self._rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


async def resolve_targets(targets: Sequence[str]) -> list[tuple[str, str]]:
    """(address to dial, configured host) for every address, names resolved to each IP."""
    found: list[tuple[str, str]] = []
    loop = asyncio.get_running_loop()
    for target in targets:
        host, _, port = target.rpartition(":")
        bare = host.strip("[]")
        try:
            ipaddress.ip_address(bare)
        except ValueError:
            pass
        else:
            found.append((target, bare))
            continue
        try:
            infos = await loop.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            found.append((target, bare))  # let gRPC report the failure
            continue
        ips = sorted({str(info[4][0]) for info in infos})
        found += [(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}", bare) for ip in ips]
    return found or [(targets[0], targets[0].rpartition(":")[0])]


def dial(address: str, host: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """A channel to ``address``; with TLS the certificate is checked against ``host``."""
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    options: tuple[tuple[str, int | str], ...] = CHANNEL_OPTIONS
    if address.rpartition(":")[0].strip("[]") != host:
        options = (*options, ("grpc.ssl_target_name_override", host))
    return grpc.aio.secure_channel(address, credentials, options=options)
