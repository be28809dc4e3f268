"""Driving cachectl in-process against a real control plane."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cachectl.main import main
from controlplane.server import ControlPlane

ROOT = Path(__file__).resolve().parents[2]


def run_main(argv: list[str]) -> int:
    """``main(argv)``, with argparse's exits turned into a status (it runs in a worker thread)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


class Cli:
    """Runs ``cachectl`` in-process (off the event loop, which serves the control plane)."""

    def __init__(self, plane: ControlPlane, capsys: pytest.CaptureFixture[str]) -> None:
        self.target = plane.address
        self.capsys = capsys

    async def run(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        args = [*argv, "--target", self.target, "--actor", "tester"]
        code = await asyncio.to_thread(run_main, args)
        out, err = self.capsys.readouterr()
        return code, out, err

    async def ok(self, *argv: str) -> str:
        code, out, err = await self.run(*argv)
        assert code == 0, err
        return out

    async def json(self, *argv: str) -> Any:
        return json.loads(await self.ok(*argv, "--json"))

    async def refused(self, *argv: str) -> str:
        code, out, err = await self.run(*argv)
        assert code == 2, out
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("cachectl: error: "), err
        return lines[0]
