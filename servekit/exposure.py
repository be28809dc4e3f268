"""Protected mode (Redis's idea): a server reachable beyond loopback must authenticate callers.

A control plane or router whose gRPC listen address is not loopback refuses to start unless it
has ``--auth-file`` or requires client certificates (``--tls-client-ca``), or the operator says
``--allow-unauthenticated`` (a private network, a sidecar that authenticates). Loopback stays
open, so the demo and tests need nothing. The refusal is one line that names the fix.
"""

from __future__ import annotations

import ipaddress

from servekit.options import SettingsError, switch

ALLOW_UNAUTHENTICATED = switch(
    "allow_unauthenticated",
    "serve a non-loopback --listen address without --auth-file or mTLS (anyone who can reach "
    "the port may call every RPC)",
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of ``HOST:PORT``) can only be reached from this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, "0.0.0.0", "::" (wildcards are not loopback), or empty


def check_exposure(
    what: str, listen: str, *, authenticated: bool, allow_unauthenticated: bool
) -> None:
    """SettingsError when ``listen`` is exposed without authentication (module docstring)."""
    host = listen.rsplit(":", 1)[0]
    if authenticated or allow_unauthenticated or is_loopback(host):
        return
    raise SettingsError(
        f"refusing to serve the {what} on {listen} without authentication: add --auth-file FILE "
        "(or mTLS with --tls-client-ca), listen on 127.0.0.1, or pass --allow-unauthenticated"
    )
