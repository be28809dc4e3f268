"""``HOST:PORT`` values, parsed one way for every service and tool.

IPv6 hosts come in brackets (``[::1]:8000``); the host returned has them removed, as socket
calls want it. The error says what is wrong without naming the option: the caller prefixes the
flag or field it came from.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_PORT = 65_535


class HostPort(NamedTuple):
    host: str
    port: int


def parse_host_port(value: str, *, lowest_port: int = 0, default_host: str = "") -> HostPort:
    """``HOST:PORT`` → (host, port), port in ``lowest_port``-65535; an empty host becomes
    ``default_host`` (an error when that is empty too). Raises ValueError."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not lowest_port <= int(port) <= MAX_PORT:
        raise ValueError(f"expected HOST:PORT with a port in {lowest_port}-{MAX_PORT}")
    host = host.strip("[]") or default_host
    if not host:
        raise ValueError("expected HOST:PORT: the host is empty")
    return HostPort(host, int(port))
