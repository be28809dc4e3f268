"""Child processes that cannot outlive the launcher: own process group, parent-death signal.

Every component runs as ``python -m <package> ...`` in its own session (process group), so a
Ctrl-C in the terminal reaches only the launcher, which then stops the children in order, and a
whole group (a process and anything it forked) is signalled at once. Each child also gets
SIGTERM from the kernel if the launcher dies without cleaning up (``servekit.processes.guarded``:
the launcher's *main thread* must spawn them, since the parent-death signal follows the thread).
No ``preexec_fn``: the launcher has gRPC threads, and forking it could abort the child.
Output goes to ``<log dir>/<name>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servekit.processes import guarded


class ProcessExitedError(RuntimeError):
    """A component exited while it was expected to run; the message points at its log."""


class ManagedProcess:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, args: Sequence[str], log_dir: Path) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> ManagedProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # The child writes to its own copy of the descriptor; ours closes once it has one.
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                guarded(self.args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check(self) -> None:
        """Raise :class:`ProcessExitedError` if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise ProcessExitedError(
                f"{self.name} exited with status {self.process.returncode}; "
                f"see {self.log_path}{self.tail()}"
            )

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return ""
        return ("\n  " + "\n  ".join(text)) if text else ""

    def signal(self, sig: int) -> None:
        """Signal the whole process group (the process and its children)."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the process group, also after its leader exited."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> bool:
        """True once the process has exited (within ``timeout`` seconds)."""
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return False
        return True


def stop_all(processes: Sequence[ManagedProcess], grace_s: float) -> None:
    """SIGTERM every group, wait up to ``grace_s`` in total, SIGKILL what is left, reap all."""
    for proc in processes:
        proc.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in processes:
        if not proc.wait(deadline - time.monotonic()):
            proc.signal(signal.SIGKILL)
            proc.wait(5.0)
    for proc in processes:
        # A group may still hold a child that ignored SIGTERM after its leader exited.
        proc.kill_group()


def python_module(module: str, *args: str) -> list[str]:
    """``[sys.executable, -m, module, *args]``: components run in this interpreter's venv."""
    return [sys.executable, "-m", module, *args]


def logged_records(log_path: Path, event: str) -> list[dict[str, Any]]:
    """Every ``event`` line of a component's JSON log, in order (other lines skipped)."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == event:
            found.append(record)
    return found


def logged_values(log_path: Path, event: str, field: str) -> list[str]:
    """``field`` of every ``event`` line of a component's JSON log, in order (others skipped)."""
    return [str(record[field]) for record in logged_records(log_path, event)]
