"""``python -m simengine`` as a real process: options, several engines, clean exit on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import msgspec
import pytest
import zmq

from servekit.options import SettingsError
from simengine.__main__ import OPTIONS, build_parser, listen_addresses


def test_help_documents_every_option_and_its_environment_variable() -> None:
    text = build_parser().format_help()
    for flag in (
        "--listen",
        "--profile",
        "--speedup",
        "--kv-blocks",
        "--model",
        "--stream-interval",
        "--kv-events-port",
    ):
        assert flag in text
    assert "CACHEROUTE_SPEEDUP" in text
    assert "reset_prefix_cache" in text


def test_listen_comes_from_flags_or_a_separated_environment_value() -> None:
    parser = build_parser()
    env = {"CACHEROUTE_LISTEN": "127.0.0.1:1 127.0.0.1:2;127.0.0.1:3"}
    assert listen_addresses(OPTIONS.parse(parser, [], env).listen) == [
        "127.0.0.1:1",
        "127.0.0.1:2",
        "127.0.0.1:3",
    ]
    args = OPTIONS.parse(build_parser(), ["--listen", "127.0.0.1:9"], env)
    assert listen_addresses(args.listen) == ["127.0.0.1:9"]  # flags replace the environment


@pytest.mark.parametrize("value", [[], ["nohost"], ["127.0.0.1:70000"]])
def test_bad_listen_values_are_refused(value: list[str]) -> None:
    with pytest.raises(SettingsError):
        listen_addresses(value)


def test_bad_options_exit_with_status_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simengine", "--listen", "127.0.0.1:0", "--speedup", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--speedup" in result.stderr


@pytest.mark.slow
def test_one_process_serves_several_engines_and_exits_cleanly_on_sigterm() -> None:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "simengine",
            "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
            "--profile", "llama-3.1-8b-bf16-h100", "--kv-blocks", "500", "--speedup", "10",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        urls: list[str] = []
        deadline = time.monotonic() + 20
        while len(urls) < 2 and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            event = json.loads(line)
            if event.get("event") == "engine serving":
                assert event["kv_blocks"] == 500
                urls.append(event["url"])
        assert len(urls) == 2 and urls[0] != urls[1]
        for url in urls:
            body = json.dumps({"prompt": "hello there", "max_tokens": 2}).encode()
            with urllib.request.urlopen(f"{url}/v1/completions", body, timeout=10) as response:
                answer = json.load(response)
            assert answer["usage"]["completion_tokens"] == 2
            assert answer["model"] == "llama-3.1-8b-bf16-h100"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.slow
def test_kv_events_port_publishes_each_engines_events_from_the_real_process() -> None:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "simengine", "--listen", "127.0.0.1:0",
            "--profile", "llama-3.1-8b-bf16-h100", "--kv-blocks", "500", "--kv-events-port", "0",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        assert process.stderr is not None
        found: dict[str, str] = {}
        deadline = time.monotonic() + 20
        while "endpoint" not in found and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            event = json.loads(line)
            if event.get("event") == "kv events publishing":
                found = event
        assert found["endpoint"].startswith("tcp://127.0.0.1:") and found["replay_endpoint"]
        sub.connect(found["endpoint"])
        for i in range(100):  # until the SUB socket has joined and a batch arrives
            prompt = f"request {i}: hello there " * 20  # new blocks every time: a new batch
            body = json.dumps({"prompt": prompt, "max_tokens": 2}).encode()
            with urllib.request.urlopen(f"{found['url']}/v1/completions", body, timeout=10):
                pass
            if sub.poll(200):
                break
        _, seq, payload = sub.recv_multipart()
        assert len(seq) == 8 and msgspec.msgpack.decode(payload)[1][0][0] == "BlockStored"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        sub.close(linger=0)
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
