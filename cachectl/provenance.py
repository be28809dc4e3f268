"""Where a study's numbers came from: the code's git commit and when the run started.

Every study document (``cachectl sim ... --out``) carries them, so a result can be traced to the
code that produced it and to whether it ran before or after a parameter freeze (the held-out
protocol of docs/results.md).
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """The checked-out commit, ``+dirty`` when the tree has uncommitted changes; "unknown"
    outside a git checkout (an installed package)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(_ROOT), "rev-parse", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def provenance(started: datetime) -> dict[str, str]:
    """Take it when the run starts: the checkout may move while a long study runs."""
    return {"git_commit": git_commit(), "started_at": started.isoformat(timespec="seconds")}


def now() -> datetime:
    return datetime.now(UTC)
