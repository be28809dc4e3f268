"""Value parsers of the router's options that ``servekit.flags`` does not have.

Shared by the declarations of the process's options and of its doors' options.
"""

from __future__ import annotations

import argparse

MIN_MESSAGE_BYTES = 64 * 1024


def message_bytes(text: str) -> int:
    value = int(text)
    if value < MIN_MESSAGE_BYTES:
        raise argparse.ArgumentTypeError(f"must be >= {MIN_MESSAGE_BYTES}, got {text!r}")
    return value


def optional_text(text: str) -> str | None:
    return text or None
