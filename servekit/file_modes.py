"""Permission checks for files that grant access: an auth file others can write lets any local
user add a write-role hash; a token file others can read hands them the token."""

from __future__ import annotations

import stat
from pathlib import Path

GROUP_WORLD_WRITE = stat.S_IWGRP | stat.S_IWOTH
GROUP_WORLD_ANY = stat.S_IRWXG | stat.S_IRWXO


def writable_by_others(path: Path) -> str | None:
    """``"mode 0o666"`` when group or others may write ``path``, else None."""
    mode = path.stat().st_mode
    return f"mode {stat.S_IMODE(mode):#o}" if mode & GROUP_WORLD_WRITE else None


def open_to_others(path: Path) -> str | None:
    """``"mode 0o644"`` when group or others have any permission on ``path``, else None."""
    mode = path.stat().st_mode
    return f"mode {stat.S_IMODE(mode):#o}" if mode & GROUP_WORLD_ANY else None
