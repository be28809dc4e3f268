"""Build the Endpoint Picker's native ext_proc transport once and cache it.

    .venv/bin/python scripts/build_extproc_native.py    # progress on stderr, the path on stdout

The source is ``native/extproc/extproc_native.cc``: a generic (byte buffer) gRPC C++ server, so
it needs no generated code and no .proto files, only the distribution's gRPC C++ library
(Debian bookworm: ``libgrpc++-dev`` 1.51, found with ``pkg-config grpc++``). When the library is
missing the script installs it with ``apt-get install -y --no-install-recommends libgrpc++-dev
pkg-config g++`` if it runs as root on a system with apt-get, and otherwise stops saying that
command. One ``g++ -O2`` call (≈ 10 s on an idle core). The binary is cached under
``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/cacheroute/extproc-native-<key>/`` where the key
hashes the source, the flags, the gRPC version, the CPU architecture and the compiler's version,
so a warm machine builds nothing.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (ROOT / "native" / "extproc" / "extproc_native.cc",)
FLAGS = ("-O2", "-std=c++17", "-Wall", "-Wextra", "-DNDEBUG")
PACKAGES = ("libgrpc++-dev", "pkg-config", "g++")
INSTALL = f"apt-get install -y --no-install-recommends {' '.join(PACKAGES)}"
NAME = "extproc_native"


def _say(text: str) -> None:
    print(f"build_extproc_native: {text}", file=sys.stderr, flush=True)


def _output(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def _compiler_version() -> str:
    out = _output(["c++", "--version"])
    return out.splitlines()[0] if out else "unknown"


def grpc_version() -> str | None:
    """The installed gRPC C++ library's version, or None when pkg-config does not find it."""
    return _output(["pkg-config", "--modversion", "grpc++"])


def cache_key() -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    text = "|".join([*FLAGS, grpc_version() or "no-grpc", platform.machine(), _compiler_version()])
    digest.update(text.encode())
    return digest.hexdigest()[:16]


def cached_binary() -> Path:
    """Where the binary for this machine and source lives (it may not exist yet)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "cacheroute" / f"extproc-native-{cache_key()}" / NAME


def ensure_packages() -> None:
    """The gRPC C++ library and a compiler, installed when root with apt-get; else OSError."""
    if grpc_version() is not None and shutil.which("c++"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise OSError(f"the gRPC C++ library is missing: install it with `sudo {INSTALL}`")
    _say(f"installing {' '.join(PACKAGES)} (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(INSTALL.split(), check=True, env=env, stdout=sys.stderr)
    if grpc_version() is None:
        raise OSError(f"`{INSTALL}` ran but pkg-config still finds no grpc++")


def build() -> Path:
    """The cached binary, built first if missing; raises CalledProcessError on a failed build."""
    ensure_packages()
    target = cached_binary()
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = _output(["pkg-config", "--cflags", "--libs", "grpc++"]) or ""
    staged = target.with_suffix(".part")
    cmd = ["c++", *FLAGS, "-o", str(staged), *map(str, SOURCES), *flags.split(), "-lpthread"]
    shown = " ".join([*cmd[: 5 + len(FLAGS)], "$(pkg-config --cflags --libs grpc++)"])
    _say(f"no cached binary for key {cache_key()}; compiling: {shown}")
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    staged.replace(target)
    _say(f"built in {time.monotonic() - start:.0f} s")
    return target


def main() -> int:
    try:
        binary = build()
    except (OSError, subprocess.CalledProcessError) as exc:
        _say(f"failed: {exc}")
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
