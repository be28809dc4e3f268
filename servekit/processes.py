"""Child processes that die with their parent, and free loopback ports.

A child must not be *forked* by a Python process that has live gRPC threads: gRPC's fork
handlers run in the child, find "other threads currently calling into gRPC" and can abort it
(SIGABRT) before it execs. ``subprocess.Popen`` forks only when it must run Python code in the
child (``preexec_fn``); without it, CPython spawns with ``vfork``/``posix_spawn``, which runs no
fork handlers. So the parent-death signal is set by :func:`guarded`, a tiny exec wrapper, rather
than by a ``preexec_fn``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# Runs in the child, between spawn and exec of the real program: set the parent-death signal,
# then give up if the parent is already gone (the race prctl alone leaves open), then exec.
# Standard library only, under -I -S, so it costs a bare interpreter start (~10 ms).
_GUARD = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(143)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def guarded(args: Sequence[str]) -> list[str]:
    """``args`` wrapped so the program gets SIGTERM when the spawning thread's process dies.

    Linux only (elsewhere ``args`` unchanged). Spawn from the thread that lives as long as the
    child should (the main thread): the kernel's parent-death signal follows the thread.
    """
    if not sys.platform.startswith("linux"):
        return list(args)
    return [sys.executable, "-I", "-S", "-c", _GUARD, str(os.getpid()), *args]


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets the parent-death signal (Linux only).

    Prefer :func:`guarded`: a ``preexec_fn`` makes ``Popen`` fork, which is unsafe in a process
    with gRPC threads (module docstring). Kept for single-threaded scripts.
    """
    if not sys.platform.startswith("linux"):
        return None

    def set_parent_death_signal() -> None:
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return set_parent_death_signal


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts: we may not signal it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
