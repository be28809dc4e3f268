"""docs/DEVELOPING.md's drawings of the planes' rooms and the simulator's modules are the code's
(scripts/room_imports.py), and every arrow in them points down (issues 21, 36)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "room_imports.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_documented_drawing_is_current() -> None:
    checked = run("--check")
    assert checked.returncode == 0, checked.stderr


def test_no_arrow_points_up() -> None:
    drawn = run().stdout
    assert "──▶" in drawn
    assert "↑" not in drawn
