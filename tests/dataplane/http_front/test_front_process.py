"""``python -m dataplane --http-listen``: the front in a real router process, and its options."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servekit.processes import free_port
from tests.support.timing import run_patiently

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--http-model-pool", "llama"], "expected MODEL=POOL"),
        (["--http-model-pool", "m=Bad Pool"], "--http-model-pool 'm=Bad Pool'"),
        (["--http-max-body", "0"], "--http-max-body"),
        (["--http-first-byte-timeout", "0"], "timeout"),
    ],
)
def test_bad_front_options_exit_2_naming_the_option(flags: list[str], message: str) -> None:
    result = run_patiently(
        [sys.executable, "-m", "dataplane", "--http-listen", "127.0.0.1:0", *flags],
        check=False, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.redis
@pytest.mark.grpc
async def test_the_router_process_serves_the_front_when_asked_and_stops_on_sigterm(
    redis_url: str,
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dataplane", "--listen", "127.0.0.1:0", "--redis-url", redis_url,
         "--metrics-listen", "off", "--http-listen", f"127.0.0.1:{port}", "--grace", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    status, health = r.status, json.loads(r.read())
            except urllib.error.HTTPError as answer:  # answered, but not healthy
                status, health = answer.code, json.loads(answer.read())
            except OSError:
                status, health = 0, {}
            if health and health["status"] != "not_synced":
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("the front never answered /health")
            await asyncio.sleep(0.1)
        assert (status, health["status"]) == (503, "no_eligible_engine")  # no engine registered
        assert health["eligible_engines"] == {"default": 0}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    assert b"http front serving" in out and b"router stopped" in out
