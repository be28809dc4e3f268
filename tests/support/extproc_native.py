"""The native ext_proc transport's binary for tests (``scripts/build_extproc_native.py``).

:func:`require_binary` finds the cached binary; without it a test is skipped with the command
that builds it, fails under ``CACHEROUTE_REQUIRE_EXTPROC_NATIVE=1`` (``.ci/run`` builds it and
sets it), and builds it itself under ``CACHEROUTE_BUILD_EXTPROC_NATIVE=1``. The same rules as
the real engine's (:mod:`tests.support.llamacpp`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.scripts import load_script

SCRIPT = "scripts/build_extproc_native.py"


def cached_binary() -> Path:
    """Where the build script keeps the binary for this machine and source (may not exist)."""
    path: Path = load_script(SCRIPT).cached_binary()
    return path


def require_binary() -> Path:
    """The cached binary for a test; skips (or fails, or builds) without it (module docstring)."""
    binary = cached_binary()
    if binary.exists():
        return binary
    if os.environ.get("CACHEROUTE_REQUIRE_EXTPROC_NATIVE") == "1":  # CI: .ci/run built it
        pytest.fail(f"CACHEROUTE_REQUIRE_EXTPROC_NATIVE=1 but no native ext_proc at {binary}")
    if os.environ.get("CACHEROUTE_BUILD_EXTPROC_NATIVE") != "1":
        pytest.skip("no cached native ext_proc transport: run .venv/bin/python "
                    f"{SCRIPT} or set CACHEROUTE_BUILD_EXTPROC_NATIVE=1")  # fmt: skip
    built: Path = load_script(SCRIPT).build()
    return built
