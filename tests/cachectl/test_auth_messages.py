"""An unauthenticated cachectl call (issue 34): the hint to set a token is said once (the server
named cachectl's flags and cachectl added them again), and the control plane logs who was
refused by peer and what it presented (it logged ``"client": null``)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
import structlog

from controlplane.services.auth import token_hash
from tests.support.cli import run_main
from tests.support.controlplane import fast_config, running

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


async def test_the_token_hint_is_said_once_and_the_refusal_log_names_the_peer(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"- {{name: ops, role: write, sha256: {token_hash('s3cret')}}}\n")
    log_path = tmp_path / "cp.log"
    with log_path.open("w") as sink:
        structlog.configure(
            processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
            logger_factory=structlog.PrintLoggerFactory(file=sink),
        )
        try:
            async with running(replace(fast_config(redis_url), auth_file=auth)) as plane:
                wrong = tmp_path / "wrong.token"
                wrong.write_text("guess\n")
                wrong.chmod(0o600)
                results = []
                for extra in ((), ("--token-file", str(wrong))):
                    argv = ["nodes", "list", "--target", plane.address, *extra]
                    code = await asyncio.to_thread(run_main, argv)
                    results.append((code, capsys.readouterr().err))
        finally:
            structlog.reset_defaults()
    for (code, err), presented in zip(
        results, ("no bearer token", "an unknown bearer token"), strict=True
    ):
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"cachectl: error: UNAUTHENTICATED: {presented}: "), err
        assert err.count("--token-file") == 1 and err.count("CACHEROUTE_TOKEN") == 1, err
    events = [json.loads(line) for line in log_path.read_text().splitlines()]
    refused = [e for e in events if e.get("event") == "rpc not authorized"]
    assert [e["presented"] for e in refused] == ["no bearer token", "an unknown bearer token"]
    assert all(e["peer"].startswith("ipv4:127.0.0.1:") and "client" not in e for e in refused)
