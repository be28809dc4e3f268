"""CLI conventions every command keeps: flag placement, --version, closed pipes, ports in use,
help texts (issue 10). Real subprocesses where the behaviour is the process's own."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachectl.main import GROUPS, build_parser, hoist_global_options, main
from tests.support.cli import Cli

SERVERS = ("controlplane", "dataplane", "agents", "simengine")


def run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def test_global_options_before_the_command_are_moved_after_it() -> None:
    assert hoist_global_options(["--target", "h:1", "--json", "status", "--pool", "p"]) == [
        "status", "--pool", "p", "--target", "h:1", "--json",
    ]  # fmt: skip
    assert hoist_global_options(["--timeout=3", "plan", "list"]) == ["plan", "list", "--timeout=3"]
    assert hoist_global_options(["plan", "list", "--json"]) == ["plan", "list", "--json"]
    # Between the group and its subcommand too, as kubectl and gh accept (issue 34) ...
    assert hoist_global_options(["plan", "--target", "h:1", "list"]) == [
        "plan", "list", "--target", "h:1",
    ]  # fmt: skip
    # ... but never past the command's words: a value is never taken for a flag.
    assert hoist_global_options(["plan", "build", "--note", "--json", "--json"]) == [
        "plan", "build", "--note", "--json", "--json",
    ]  # fmt: skip
    assert hoist_global_options(["nodes", "add", "n1", "--json"]) == [
        "nodes",
        "add",
        "n1",
        "--json",
    ]


@pytest.mark.redis
@pytest.mark.grpc
async def test_connection_and_output_flags_work_before_or_after_the_command(
    cli: Cli,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def status(argv: list[str]) -> tuple[int, str]:
        code = main(argv)
        return code, capsys.readouterr().out

    before = await asyncio.to_thread(status, ["--target", cli.target, "--json", "status"])
    after = await asyncio.to_thread(status, ["status", "--target", cli.target, "--json"])
    assert before[0] == after[0] == 0
    assert json.loads(before[1]).keys() == json.loads(after[1]).keys() >= {"pools"}


def test_version_on_cachectl_and_every_server() -> None:
    for argv in (["cachectl", "--version"], *([m, "--version"] for m in SERVERS)):
        done = run(*argv)
        assert done.returncode == 0, done.stderr
        name = "cachectl" if argv[0] == "cachectl" else f"python -m {argv[0]}"
        assert done.stdout.startswith(name + " ") and done.stdout.split()[-1][0].isdigit()


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    rates = tmp_path / "rates.csv"
    rates.write_text("key,rate\n" + "".join(f"k{i},{i + 1}\n" for i in range(3000)))
    plan = tmp_path / "plan.bin"
    built = run("cachectl", "plan", "build", "--rates", str(rates), "--num-nodes", "8",
                "--q-cap", "500", "--slots-per-node", "400", "--out", str(plan))  # fmt: skip
    assert built.returncode == 0, built.stderr
    shell = f"{sys.executable} -m cachectl plan show {plan} --top 3000 | head -n 1"
    done = subprocess.run(
        ["bash", "-c", shell], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith("plan p")
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.grpc
def test_a_grpc_port_in_use_is_one_error_naming_the_address(taken_port: int) -> None:
    address = f"127.0.0.1:{taken_port}"
    done = run("dataplane", "--listen", address, "--redis-url", "redis://127.0.0.1:1/0",
               "--metrics-listen", "off", "--startup-timeout", "0.2")  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"cannot listen on {address} (gRPC)" in done.stderr


@pytest.mark.redis
def test_a_metrics_port_in_use_is_one_error_naming_the_address(taken_port: int) -> None:
    address = f"127.0.0.1:{taken_port}"
    done = run("controlplane", "--listen", "127.0.0.1:0", "--embedded-redis-port", "0",
               "--metrics-listen", address)  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"cannot listen on {address} (metrics)" in done.stderr


def _all_help(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _all_help(child)


def test_help_texts_have_no_markup_or_stale_paths() -> None:
    for text in _all_help(build_parser()):
        assert "``" not in text and "docs/notes" not in text, text
        assert not re.search(r":(mod|func|class|meth|attr):", text), text  # issue 34


def test_help_marks_what_rates_requires() -> None:
    text = next(t for t in _all_help(build_parser()) if "--slots-per-node W" in t)
    # --q-cap, --slots-per-node and --out
    assert " ".join(text.split()).count("required with --rates") == 3


def test_top_level_help_names_every_group_without_importing_them() -> None:
    code = (
        "import sys; from cachectl.main import build_parser; build_parser(only='').format_help(); "
        "heavy = [m for m in ('grpc', 'numpy', 'aiohttp', 'matplotlib') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr
    text = build_parser(only="").format_help()
    assert all(name in text for name in GROUPS)
