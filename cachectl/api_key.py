"""The bearer token ``load`` and ``knee`` send to an OpenAI-compatible server.

A token on the command line shows in ``ps`` and the shell history (issue 34: ``--api-key`` was the
only way), so it also comes from a file or the environment, the OpenAI client's own rule:
``--api-key-file FILE`` (stripped), else ``--api-key`` (kept for scripts), else
``$OPENAI_API_KEY``, else none.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from cachectl.errors import CliError

API_KEY_ENV = "OPENAI_API_KEY"


def add_api_key_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """``--api-key-file`` and ``--api-key`` (mutually exclusive)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--api-key-file", type=Path, metavar="FILE",
        help=f"file holding the bearer token for {what} (default: ${API_KEY_ENV}, else none)",
    )  # fmt: skip
    group.add_argument(
        "--api-key", metavar="TOKEN",
        help=f"the token itself (shows in ps: prefer --api-key-file or ${API_KEY_ENV})",
    )  # fmt: skip


def api_key(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str | None:
    """The token by the module docstring's order; an unreadable or empty file names the flag."""
    path: Path | None = getattr(args, "api_key_file", None)
    if path is not None:
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise CliError(f"--api-key-file {path}: {exc.strerror}") from None
        if not token:
            raise CliError(f"--api-key-file {path} is empty")
        return token
    given: str | None = getattr(args, "api_key", None)
    if given:
        return given
    env = os.environ if environ is None else environ
    return env.get(API_KEY_ENV, "").strip() or None
