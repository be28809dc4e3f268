"""Engine addresses are ``HOST:PORT`` and nothing else.

An agent-reported address went raw into the picker's ``x-gateway-destination-endpoint`` header
and ``envoy.lb`` metadata: ``evil,IP:PORT`` became two endpoints, and NUL, ``;``, quotes and
U+202E passed through. An address is now, everywhere it enters (the node report, ``AddNode``,
``cachectl nodes add``) and again where a header is built from it (the picker):

* an IPv4 literal, an IPv6 literal in brackets (``[::1]:8000``), or an RFC 1123 host name
  (ASCII letters, digits and hyphens in dot-separated labels of 1-63 characters, no label
  starting or ending with a hyphen, 253 characters at most);
* a colon and a port of 1-5 digits in 1-65535.

Pure: the control plane and the router share it.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_OTHER = re.compile(r"[^A-Za-z0-9.:-]")  # outside a name or an unbracketed IPv6 literal
MAX_NAME = 253


class InvalidEndpointError(ValueError):
    """Not ``HOST:PORT``; the message says what is wrong (the caller names the field)."""


def _host_problem(host: str) -> str:
    if host.startswith("["):
        if not host.endswith("]"):
            return "an IPv6 host must be [ADDRESS]"
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "the bracketed host is not an IPv6 address"
        return ""
    if not host.isascii() or len(host) > MAX_NAME:
        return "the host must be an IP address or a DNS name (ASCII, at most 253 characters)"
    if _OTHER.search(host):
        return "the host must be an IP address or a DNS name (letters, digits, '-' and '.')"
    if ":" in host:
        return "put an IPv6 host in brackets: [ADDRESS]:PORT"
    labels = host.removesuffix(".").split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "the host is not an IPv4 address"
        return ""
    if not all(_LABEL.fullmatch(label) for label in labels):
        return "the host must be an IP address or a DNS name (letters, digits, '-' and '.')"
    return ""


def check_endpoint(address: str) -> str:
    """``address`` unchanged when it is ``HOST:PORT`` (module docstring); else
    :class:`InvalidEndpointError`."""
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        problem = "expected HOST:PORT"
    elif not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        problem = "the port must be a number in 1-65535"
    else:
        problem = _host_problem(host)
    if problem:
        raise InvalidEndpointError(problem)
    return address


def is_endpoint(address: str) -> bool:
    try:
        check_endpoint(address)
    except InvalidEndpointError:
        return False
    return True
