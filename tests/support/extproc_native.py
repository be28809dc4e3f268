"""The native ext_proc transport's binary for tests (``scripts/build_extproc_native.py``).

:func:`require_binary` finds the cached binary; without it a test is skipped with the command
that builds it, fails under ``CACHEROUTE_REQUIRE_EXTPROC_NATIVE=1`` (``.ci/run`` builds it and
sets it), and builds it itself under ``CACHEROUTE_BUILD_EXTPROC_NATIVE=1``. The same rules as
the real engine's (:func:`tests.support.scripts.require_built`).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.scripts import require_built

SCRIPT = "scripts/build_extproc_native.py"


def require_binary() -> Path:
    """The cached binary for a test; skips (or fails, or builds) without it (module docstring)."""
    return require_built(SCRIPT, "EXTPROC_NATIVE", "native ext_proc transport")
