"""Private temporary directories: a dead process's is swept, a live one's is kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servekit.private_dirs import private_dir, sweep_dead

PREFIX = "cacheroute-test-"


def dead_pid() -> int:
    """The pid of a real process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_processs_directory_is_swept_when_the_next_one_is_made(tmp_path: Path) -> None:
    stale = tmp_path / f"{PREFIX}{dead_pid()}-abc123"
    stale.mkdir()
    (stale / "picker.sock").touch()
    live = tmp_path / f"{PREFIX}{os.getppid()}-def456"  # a running process (pytest's parent)
    live.mkdir()
    unrelated = tmp_path / f"{PREFIX}notapid-1"
    unrelated.mkdir()
    other_prefix = tmp_path / f"other-{dead_pid()}-1"
    other_prefix.mkdir()

    mine = private_dir(PREFIX, str(tmp_path))

    assert not stale.exists()
    assert live.is_dir() and unrelated.is_dir() and other_prefix.is_dir()
    assert mine.is_dir() and mine.name.startswith(f"{PREFIX}{os.getpid()}-")
    assert mine.stat().st_mode & 0o777 == 0o700
    assert sweep_dead(tmp_path, PREFIX) == []  # its own directory is a live process's
