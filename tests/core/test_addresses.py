"""dataplane.core.addresses: HOST:PORT and nothing else (issue 32, failure 5: ``evil,IP:PORT``
became two endpoints in the picker's header; NUL, ``;``, quotes and U+202E passed through)."""

from __future__ import annotations

import pytest

from dataplane.core.addresses import InvalidEndpointError, check_endpoint, is_endpoint

GOOD = [
    "10.0.0.1:8000",
    "127.0.0.1:1",
    "[::1]:65535",
    "[fd00::1:2]:8000",
    "engine-0.engines.inference.svc.cluster.local:8000",
    "localhost:8000",
    "a.b.:80",
    "node-1.engines:8000",
]
BAD = [
    ("evil.example:80,10.0.0.1:8000", "DNS name"),
    ("evil,10.0.0.1:8000", "DNS name"),
    ("10.0.0.1\x00:8000", "DNS name"),
    ("a;b:8000", "DNS name"),
    ('"quoted":8000', "DNS name"),
    ("evil\u202egro:8000", "ASCII"),
    ("host name:80", "DNS name"),
    ("10.0.0.1:0", "port"),
    ("10.0.0.1:65536", "port"),
    ("10.0.0.1:+80", "port"),
    ("10.0.0.1:٨٠", "port"),
    ("10.0.0.1:000080", "port"),
    ("999.0.0.1:80", "IPv4"),
    ("1.2.3:80", "IPv4"),
    ("::1:80", "brackets"),
    ("[not-v6]:80", "IPv6"),
    ("-lead.example:80", "DNS name"),
    ("trail-.example:80", "DNS name"),
    ("a..b:80", "DNS name"),
    (f"{'a' * 64}.example:80", "DNS name"),
    (f"{'a.' * 130}b:80", "253"),
    ("no-port-here", "HOST:PORT"),
    (":8000", "HOST:PORT"),
    ("http://10.0.0.1:8000", "DNS name"),
]


@pytest.mark.parametrize("address", GOOD)
def test_an_ip_literal_or_an_rfc_1123_name_with_a_port_passes_unchanged(address: str) -> None:
    assert check_endpoint(address) == address
    assert is_endpoint(address)


@pytest.mark.parametrize(("address", "words"), BAD)
def test_anything_else_is_refused_saying_what_is_wrong(address: str, words: str) -> None:
    with pytest.raises(InvalidEndpointError, match=words):
        check_endpoint(address)
    assert not is_endpoint(address)
