"""Who is calling a router: the name planning and passive-health feedback go by.

With an auth file (the control plane's format, :mod:`servekit.auth_file`) a caller is the client
its bearer token or mTLS certificate subject names (any role), or "" when it has neither or an
unknown one; without one, a caller is its peer host (``ipv4:127.0.0.1``, no port).
"""

from __future__ import annotations

from typing import Any

import grpc

from servekit.auth_file import AuthTable, bearer_token, token_hash

_Context = grpc.aio.ServicerContext[Any, Any]
MAX_CACHED_TOKENS = 1024


class CallerNames:
    def __init__(self, auth: AuthTable | None) -> None:
        self._auth = auth
        self._names: dict[str, str] = {}  # token → client name ("" unknown), bounded

    def name(self, context: _Context) -> str:
        """The caller's name ("" when an auth file is set and the caller is not in it)."""
        auth = self._auth
        if auth is None:
            peer = context.peer() or ""
            return peer.rpartition(":")[0] or peer  # "ipv4:127.0.0.1:5432" → "ipv4:127.0.0.1"
        token = bearer_token(context.invocation_metadata())
        if token is not None:
            name = self._names.get(token)
            if name is None:
                client = auth.by_hash.get(token_hash(token)) if token else None
                name = client.name if client is not None else ""
                if len(self._names) >= MAX_CACHED_TOKENS:
                    self._names.clear()
                self._names[token] = name
            return name
        if auth.by_subject:
            found = context.auth_context() or {}
            for key in ("x509_common_name", "x509_subject_alternative_name"):
                for value in found.get(key, ()):
                    subject = value.decode() if isinstance(value, bytes) else str(value)
                    client = auth.by_subject.get(subject)
                    if client is not None:
                        return client.name
        return ""
