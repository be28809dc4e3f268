"""Child processes that die with their parent, and free loopback ports."""

from __future__ import annotations

import ctypes
import signal
import socket
import sys
from collections.abc import Callable


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes a child get SIGTERM when its parent dies (Linux only).

    It keeps a crashed demo or test run from leaving Redis or engine processes behind.
    """
    if not sys.platform.startswith("linux"):
        return None

    def set_parent_death_signal() -> None:
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return set_parent_death_signal
