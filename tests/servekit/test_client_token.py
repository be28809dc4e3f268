"""The bearer token agents and cachectl send: from --token-file, else $CACHEROUTE_TOKEN."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from cachectl.admin_client import token
from cachectl.errors import CliError
from servekit.client_token import TOKEN_ENV, TokenFileError, read_token


def test_the_file_wins_over_the_environment_and_is_stripped(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  tok-1\n")
    assert read_token(path, {TOKEN_ENV: "from-env"}) == "tok-1"


def test_without_a_file_the_environment_gives_it_and_blank_means_none() -> None:
    assert read_token(None, {TOKEN_ENV: " env \n"}) == "env"
    assert read_token(None, {TOKEN_ENV: "   "}) is None
    assert read_token(None, {}) is None


def test_an_empty_or_missing_file_is_an_error_naming_the_flag(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(TokenFileError, match=rf"^--token-file {re.escape(str(empty))} is empty$"):
        read_token(empty, {TOKEN_ENV: "env"})  # a broken file never falls back to the env
    missing = tmp_path / "missing"
    expected = rf"^--token-file {re.escape(str(missing))}: No such file"
    with pytest.raises(TokenFileError, match=expected):
        read_token(missing, {})


def test_cachectl_reports_a_bad_token_file_as_its_own_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(CliError, match=r"--token-file .*missing: No such file"):
        token(argparse.Namespace(token_file=missing), {})
    assert token(argparse.Namespace(), {TOKEN_ENV: "env"}) == "env"
