"""This machine's addresses, for tests that must call from beyond loopback."""

from __future__ import annotations

import socket


def non_loopback_ip() -> str | None:
    """An IPv4 address of this machine that is not loopback (None on a loopback-only host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks a route
            ip = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if ip.startswith("127.") else ip
