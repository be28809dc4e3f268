"""A client's bearer token: ``--token-file`` (stripped), else ``$CACHEROUTE_TOKEN``, else none.

Agents and ``cachectl`` read it the same way, so the rules live here once: the token is never a
command-line value (it would show in ``ps``), a file that cannot be read or is empty is an error
naming the flag, and an unset or blank variable means no token.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from servekit.file_modes import open_to_others

TOKEN_ENV = "CACHEROUTE_TOKEN"


class TokenFileError(ValueError):
    """The ``--token-file`` cannot be read or holds no token; the message names the flag."""


def read_token(path: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The token from ``path``, else from ``$CACHEROUTE_TOKEN``; None when neither has one."""
    if path is not None:
        try:
            token = path.read_text().strip()
            loose = open_to_others(path)
        except OSError as exc:
            raise TokenFileError(f"--token-file {path}: {exc.strerror}") from None
        if not token:
            raise TokenFileError(f"--token-file {path} is empty")
        if loose is not None:  # a warning, not a refusal: a mounted secret may be 0644
            # stderr, not a log line: cachectl's stdout may be --json
            print(f"warning: --token-file {path}: {loose}; chmod 600 it", file=sys.stderr)
        return token
    env = os.environ if environ is None else environ
    return env.get(TOKEN_ENV, "").strip() or None
