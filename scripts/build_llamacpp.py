"""Build llama.cpp's ``llama-server`` once and cache it (for the real-engine tests and benchmark).

    .venv/bin/python scripts/build_llamacpp.py    # progress on stderr, the binary's path on stdout

The source is the llama.cpp that the ``llama-cpp-python`` source distribution vendors (pinned:
``LLAMA_CPP_PYTHON`` and the file's ``SDIST_SHA256``). Only that one file is fetched: its address
comes from the package index's simple API (PEP 691, what pip reads; ``PIP_INDEX_URL`` or PyPI) and
its hash is checked against the pin. ``pip download`` is not used because it prepares metadata,
which builds build backends from source first (5+ minutes on a busy machine). Configured without
network or web UI and portable (``GGML_NATIVE=OFF``: AVX2, no host-only instructions), built
with ``-j2`` (≈ 4 min on 2 idle cores, most of an hour on a busy one: progress is printed). The
binary is cached under ``$XDG_CACHE_HOME`` (default ``~/.cache``)
``/cacheroute/llama-server-<key>/`` where the key hashes the version, the flags, the CPU
architecture and the compiler's version, so a warm machine builds nothing (well under a second).
``../shared/docs/REAL-ENGINE.md`` records what was found to work here.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

LLAMA_CPP_PYTHON = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def _compiler_version() -> str:
    try:
        out = subprocess.run(["c++", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def cache_key() -> str:
    text = "|".join([LLAMA_CPP_PYTHON, *CMAKE_FLAGS, platform.machine(), _compiler_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_binary() -> Path:
    """Where the binary for this machine lives (it may not exist yet)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "cacheroute" / f"llama-server-{cache_key()}" / "llama-server"


def _say(text: str) -> None:
    print(f"build_llamacpp: {text}", file=sys.stderr, flush=True)


def _sdist_url(name: str) -> str:
    """The file's address from the index's JSON simple API, the one request pip would make."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    req = urllib.request.Request(
        f"{index}/llama-cpp-python/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        files = json.load(resp)["files"]
    for entry in files:
        if entry["filename"] == name:
            url: str = entry["url"]
            return url
    raise OSError(f"{name} is not on {index}")


def _download(url: str, dest: Path) -> None:
    """Stream ``url`` into ``dest``, printing progress every 10%, and check the pinned hash."""
    digest = hashlib.sha256()
    staged = dest.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=120) as resp, open(staged, "wb") as out:
        total = int(resp.headers.get("Content-Length") or 0)
        done, shown = 0, -1
        while chunk := resp.read(1 << 20):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            tenth = done * 10 // total if total else -1
            if tenth > shown:
                shown = tenth
                _say(f"download {done / 1e6:.1f}/{total / 1e6:.1f} MB")
    if digest.hexdigest() != SDIST_SHA256:
        staged.unlink()
        raise OSError(f"{url}: sha256 {digest.hexdigest()} is not the pinned {SDIST_SHA256}")
    staged.replace(dest)


def _sdist() -> Path:
    """The pinned source distribution, downloaded once into the cache."""
    folder = cached_binary().parent.parent / "sdist"
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not (folder / name).exists():
        folder.mkdir(parents=True, exist_ok=True)
        url = _sdist_url(name)
        _say(f"fetching {url}")
        _download(url, folder / name)
    return folder / name


def _run(cmd: list[str], out: IO[str], what: str) -> None:
    """Run one build step, log everything, and print ninja's ``[n/N]`` progress every 5%."""
    start = time.monotonic()
    shown = -1
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            step = _NINJA_STEP.match(line)
            if step:
                n, total = int(step[1]), int(step[2])
                twentieth = n * 20 // total
                if twentieth > shown:
                    shown = twentieth
                    _say(f"{what} step {n}/{total} ({time.monotonic() - start:.0f} s)")
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    _say(f"{what} done in {time.monotonic() - start:.0f} s")


def build(log: Path) -> Path:
    """The cached binary, built first if missing; raises CalledProcessError on a failed step."""
    target = cached_binary()
    if target.exists():
        return target
    _say(f"no cached binary for key {cache_key()}; building into {target.parent} (log {log})")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out, tempfile.TemporaryDirectory(prefix="llamacpp-build-") as tmp:
        work = Path(tmp)
        sdist = _sdist()
        prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            tar.extractall(work, members=members, filter="data")
        source = work / prefix
        build_dir = work / "build"
        _run(["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", *CMAKE_FLAGS],
             out, "configure")  # fmt: skip
        _run(["nice", "-n", "10", "cmake", "--build", str(build_dir), "--target",
              "llama-server", "-j2"], out, "compile")  # fmt: skip
        staged = target.with_suffix(".tmp")
        shutil.copy2(build_dir / "bin" / "llama-server", staged)
        staged.replace(target)  # atomic: a concurrent run sees all or nothing
    return target


def main() -> int:
    log = Path(tempfile.gettempdir()) / "cacheroute-llamacpp-build.log"
    try:
        binary = build(log)
    except (subprocess.CalledProcessError, OSError, StopIteration) as exc:
        print(f"build failed: {exc!r}; log in {log}", file=sys.stderr)
        return 1
    _say(f"cache key {cache_key()}")
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
