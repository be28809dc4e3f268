"""``scripts/build_llamacpp.py``: a warm cache builds and fetches nothing; a cold one fetches only
the pinned sdist (hash-checked) and prints its progress.

The compile itself (minutes to most of an hour) is not repeated here: ``.ci/run`` runs the script
before the tests, and the ``llamacpp`` tests use what it built.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.scripts import ROOT, load_script

build = load_script("scripts/build_llamacpp.py")


def test_a_warm_cache_prints_the_binary_and_its_key_and_touches_no_network(
    tmp_path: Path,
) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    key = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, 'scripts'); "
         "import build_llamacpp as b; print(b.cache_key())"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    binary = tmp_path / "cacheroute" / f"llama-server-{key}" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    done = subprocess.run(
        [sys.executable, "scripts/build_llamacpp.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**env, "PIP_INDEX_URL": "http://127.0.0.1:9/unreachable"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{binary}\n"  # stdout is the path alone: .ci/run reads it
    assert f"cache key {key}" in done.stderr
    assert "download" not in done.stderr and "compile" not in done.stderr


def test_compile_progress_is_printed_every_twentieth_of_the_steps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    steps = "".join(f"print('[{i}/40] Building x{i}.o')\n" for i in range(1, 41))
    with open(tmp_path / "log", "w") as log:
        build._run([sys.executable, "-c", steps], log, "compile")
    err = capsys.readouterr().err
    shown = [line for line in err.splitlines() if " step " in line]
    assert [line.split(" step ")[1].split(" ")[0] for line in shown] == [
        f"{i}/40" for i in (1, *range(2, 41, 2))
    ]
    assert "compile done in" in err
    assert (tmp_path / "log").read_text().count("Building") == 40  # everything is logged
    with open(tmp_path / "log2", "w") as log, pytest.raises(subprocess.CalledProcessError):
        build._run([sys.executable, "-c", "raise SystemExit(3)"], log, "compile")


class _Index(BaseHTTPRequestHandler):
    """A package index's JSON simple API and its files, from ``server.files``."""

    def do_GET(self) -> None:
        files: dict[str, bytes] = self.server.files  # type: ignore[attr-defined]
        if self.path == "/simple/llama-cpp-python/":
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            listing = [{"filename": n, "url": f"{base}/files/{n}"} for n in files]
            body = json.dumps({"files": listing}).encode()
        elif self.path.startswith("/files/") and self.path[7:] in files:
            body = files[self.path[7:]]
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bytes]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    server.files = {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    try:
        yield server.files  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def test_only_the_pinned_file_is_fetched_and_its_hash_is_checked(
    index: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"llama_cpp_python-{build.LLAMA_CPP_PYTHON}.tar.gz"
    data = b"x" * 3_000_000
    index[name] = data
    index["llama_cpp_python-0.0.1.tar.gz"] = b"other"
    url = build._sdist_url(name)
    assert url.endswith(f"/files/{name}")
    with pytest.raises(OSError, match="is not the pinned"):
        build._download(url, tmp_path / name)
    assert not list(tmp_path.iterdir())  # neither the file nor a partial one is kept
    assert "download 3.0/3.0 MB" in capsys.readouterr().err
    monkeypatch.setattr(build, "SDIST_SHA256", hashlib.sha256(data).hexdigest())
    build._download(url, tmp_path / name)
    assert (tmp_path / name).read_bytes() == data
    with pytest.raises(OSError, match="is not on"):
        build._sdist_url("llama_cpp_python-9.9.9.tar.gz")
