"""``load`` and ``knee`` take their bearer token from a file or ``$OPENAI_API_KEY`` (issue 34: only
``--api-key TOKEN`` existed, which shows in ``ps``); the token reaches the requests' headers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cachectl.api_key import api_key
from cachectl.errors import CliError
from cachectl.loadgen.openai_client import OpenAILoadClient
from cachectl.main import build_parser


def _args(group: str, *extra: str) -> argparse.Namespace:
    required = ["--qps", "1", "--duration", "1"] if group == "load" else []
    argv = [group, "--openai", "http://127.0.0.1:1", *required, *extra]
    return build_parser(only=group).parse_args(argv)


@pytest.mark.parametrize("group", ["load", "knee"])
def test_the_token_comes_from_the_file_the_flag_or_the_environment(
    group: str, tmp_path: Path
) -> None:
    secret = tmp_path / "key"
    secret.write_text("sk-file\n")
    env = {"OPENAI_API_KEY": "sk-env"}
    assert api_key(_args(group, "--api-key-file", str(secret)), env) == "sk-file"
    assert api_key(_args(group, "--api-key", "sk-flag"), env) == "sk-flag"
    assert api_key(_args(group), env) == "sk-env"
    assert api_key(_args(group), {}) is None
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CliError, match=r"--api-key-file .*empty is empty"):
        api_key(_args(group, "--api-key-file", str(empty)), env)
    with pytest.raises(CliError, match=r"--api-key-file .*missing"):
        api_key(_args(group, "--api-key-file", str(tmp_path / "missing")), env)
    with pytest.raises(SystemExit):  # one or the other
        _args(group, "--api-key-file", str(secret), "--api-key", "x")


async def test_the_token_is_sent_as_a_bearer_header(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("sk-file\n")
    token = api_key(_args("load", "--api-key-file", str(secret)), {})
    client = OpenAILoadClient(["http://127.0.0.1:1"], model="m", api_key=token)
    async with client:
        assert client.headers["Authorization"] == "Bearer sk-file"
