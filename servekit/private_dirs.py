"""Private temporary directories named for their process, and the sweep of dead processes' ones.

A server removes its temporary directory when it stops; one that is killed (SIGKILL, the OOM
killer) cannot. Each crash left a directory in the temporary directory for good: the native
ext_proc transport's socket (``cacheroute-extproc-*``) and an embedded Redis's log
(``cacheroute-redis-*``), one of each per full test run, from the tests that kill a picker and a
control plane. The name now carries the owner's pid, and whoever makes a new directory with the
same prefix first removes those whose pid no longer runs. A reused pid only postpones a sweep;
another user's directories are never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from servekit.processes import pid_alive


def private_dir(prefix: str, root: str | None = None) -> Path:
    """A new 0700 directory ``<prefix><pid>-<random>``, after sweeping dead processes' ones."""
    sweep_dead(Path(root or tempfile.gettempdir()), prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))


def sweep_dead(root: Path, prefix: str) -> list[Path]:
    """Remove this user's ``prefix`` directories whose process is gone; the ones removed."""
    removed = []
    for path in root.glob(f"{prefix}*-*"):
        pid_text = path.name[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or pid_alive(int(pid_text)):
            continue
        try:
            if not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
