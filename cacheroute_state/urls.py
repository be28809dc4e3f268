"""Store URLs as they may be shown: in logs, errors and status lines, never with a password."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

SENTINEL_SCHEME = "redis+sentinel://"
CLUSTER_SCHEME = "redis+cluster://"


def redacted(url: str) -> str:
    """``url`` with any password replaced by ``***`` (``redis://:***@host:6379/0``; in a
    ``redis+sentinel://`` URL also ``sentinel_password=***``)."""
    if url.startswith((SENTINEL_SCHEME, CLUSTER_SCHEME)):  # several hosts: no urlsplit
        hidden = re.sub(r"^(redis\+\w+://[^:@/]*):[^@/]*@", r"\1:***@", url)
        return re.sub(r"(sentinel_password=)[^&]*", r"\1***", hidden)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable store URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
