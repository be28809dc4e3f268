"""Build llama.cpp's ``llama-server`` once and cache it (for the real-engine end-to-end test).

    .venv/bin/python scripts/build_llamacpp.py        # prints the binary's path

The source is the llama.cpp that the ``llama-cpp-python`` source distribution vendors (pinned:
``LLAMA_CPP_PYTHON``), fetched with pip from the package registry. Configured without network or
web UI and portable (``GGML_NATIVE=OFF``: AVX2, no host-only instructions), built with ``-j2``
(≈ 4 min on 2 idle cores). The binary is cached under ``$XDG_CACHE_HOME`` (default ``~/.cache``)
``/cacheroute/llama-server-<key>/`` where the key hashes the version, the flags, the CPU
architecture and the compiler's version, so a warm machine builds nothing.
``../shared/docs/REAL-ENGINE.md`` records what was found to work here.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any

LLAMA_CPP_PYTHON = "0.3.36"
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


def _sdist(out: IO[Any]) -> Path:
    """The pinned source distribution, downloaded once into the cache."""
    folder = cached_binary().parent.parent / "sdist"
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not (folder / name).exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(folder)],
            check=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return folder / name


def build(log: Path) -> Path:
    """The cached binary, built first if missing; raises CalledProcessError on a failed step."""
    target = cached_binary()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out, tempfile.TemporaryDirectory(prefix="llamacpp-build-") as tmp:
        work = Path(tmp)
        sdist = _sdist(out)
        prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            tar.extractall(work, members=members, filter="data")
        source = work / prefix
        build_dir = work / "build"
        subprocess.run(
            ["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", *CMAKE_FLAGS],
            check=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        subprocess.run(
            ["nice", "-n", "10", "cmake", "--build", str(build_dir), "--target",
             "llama-server", "-j2"],
            check=True, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        staged = target.with_suffix(".tmp")
        shutil.copy2(build_dir / "bin" / "llama-server", staged)
        staged.replace(target)  # atomic: a concurrent run sees all or nothing
    return target


def main() -> int:
    log = Path(tempfile.gettempdir()) / "cacheroute-llamacpp-build.log"
    try:
        print(build(log))
    except (subprocess.CalledProcessError, OSError, StopIteration) as exc:
        print(f"build failed: {exc!r}; log in {log}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
