"""One HOST:PORT parser for every service and tool."""

from __future__ import annotations

import pytest

from servekit.addresses import HostPort, parse_host_port


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:0", HostPort("127.0.0.1", 0)),
        ("engines.local:8000", HostPort("engines.local", 8000)),
        ("[::1]:65535", HostPort("::1", 65535)),
    ],
)
def test_host_and_port_come_apart_with_ipv6_brackets_removed(
    value: str, expected: HostPort
) -> None:
    assert parse_host_port(value) == expected


@pytest.mark.parametrize("value", ["", "8000", "host:", "host:http", "host:65536", "host:-1"])
def test_malformed_values_say_what_is_expected(value: str) -> None:
    with pytest.raises(ValueError, match=r"expected HOST:PORT with a port in 0-65535"):
        parse_host_port(value)


def test_an_empty_host_takes_the_default_or_is_refused() -> None:
    assert parse_host_port(":9100", default_host="0.0.0.0") == HostPort("0.0.0.0", 9100)
    with pytest.raises(ValueError, match="the host is empty"):
        parse_host_port(":9100")


def test_the_lowest_port_is_the_callers() -> None:
    with pytest.raises(ValueError, match="a port in 1-65535"):
        parse_host_port("h:0", lowest_port=1)
