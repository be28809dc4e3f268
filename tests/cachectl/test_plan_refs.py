"""Flags and plan arguments where users type them (issue 34): connection flags before, between or
after the command's words, and ``plan route`` / ``plan diff`` taking a plan file or a stored
version alike, with the same answer either way."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dataplane.core.table_codec import encode_table
from tests.support.cli import Cli, run_main
from tests.support.factories import small_plan

pytestmark = pytest.mark.grpc


async def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(run_main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = await _main(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


async def test_connection_flags_go_before_between_or_after_the_command_words(
    cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    table = small_plan(seed=4)
    path = tmp_path / "plan.pb"
    path.write_bytes(encode_table(table))
    await cli.ok("plan", "import", str(path))
    target = ("--target", cli.target)
    placements = (
        ("plan", *target, "list"),
        (*target, "plan", "list"),
        ("plan", "list", *target),
    )
    listed = [await _json(capsys, *argv) for argv in placements]
    assert all(one["plans"] == listed[0]["plans"] for one in listed)
    assert listed[0]["plans"][0]["metadata"]["version"] == table.version
    # `plan route` of a stored version reads the control plane, so it takes the flags too.
    key = ("--key", table.top_keys[0].key)
    routed = await _json(capsys, *target, "plan", "route", table.version, *key)
    assert routed == await _json(capsys, "plan", "route", str(path), *key)
    assert routed["warm"] is True and routed["version"] == table.version


async def test_route_and_diff_take_a_file_or_a_stored_version_alike(
    cli: Cli, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = []
    for seed in (5, 6):
        table = small_plan(seed=seed)
        path = tmp_path / f"plan-{seed}.pb"
        path.write_bytes(encode_table(table))
        await cli.ok("plan", "import", str(path))
        files.append((str(path), table.version))
    (old_file, old), (new_file, new) = files
    diffs = [
        await cli.json("plan", "diff", a, b)
        for a, b in ((old, new), (old_file, new_file), (old_file, new), (old, new_file))
    ]
    assert diffs[0]["churn"] > 0 and int(diffs[0]["keys_moved"]) > 0
    assert all(d == diffs[0] for d in diffs[1:]), diffs
    text = await cli.ok("plan", "diff", old_file, new)
    assert text.startswith(f"{old} -> {new}: churn ")
    missing = await cli.refused("plan", "route", "p0123456789abcdef", "--key", "k")
    assert "no such plan file, and the control-plane at" in missing
    assert "no such plan file" in await cli.refused("plan", "diff", "nothing.pb", new)
