"""Load a repository script (``bench/``, ``scripts/``) as a module, for tests of its parts; find
the binary a build script caches (llama-server, the native ext_proc transport) for a test."""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """``relative`` (e.g. ``bench/bench_route.py``) imported under its file name."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _cached_binary(script: str) -> Path:
    """Where ``script`` caches its binary: its key asks the compiler and pkg-config for their
    versions (two child processes), so once per test worker, not once per test."""
    binary: Path = load_script(script).cached_binary()
    return binary


def require_built(script: str, env: str, what: str, *build_args: object) -> Path:
    """The binary ``script`` (``cached_binary()``, ``build()``) caches for this machine: skips the
    test without it, fails it under ``CACHEROUTE_REQUIRE_<env>=1`` (``.ci/run`` builds the binary
    and sets that), builds it under ``CACHEROUTE_BUILD_<env>=1``."""
    binary = _cached_binary(script)
    if binary.exists():
        return binary
    module = load_script(script)
    if os.environ.get(f"CACHEROUTE_REQUIRE_{env}") == "1":
        pytest.fail(f"CACHEROUTE_REQUIRE_{env}=1 but no {what} at {binary}")
    if os.environ.get(f"CACHEROUTE_BUILD_{env}") != "1":
        pytest.skip(f"no cached {what}: run .venv/bin/python {script} "
                    f"or set CACHEROUTE_BUILD_{env}=1")  # fmt: skip
    built: Path = module.build(*build_args)
    return built
