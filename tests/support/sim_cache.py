"""Both prefix KV cache implementations for tests: the Python reference and the C build.

The C class (``sim._prefix_cache``, ``scripts/build_sim_native.py``) is skipped with the command
that builds it when it is missing, and fails the test under ``CACHEROUTE_REQUIRE_SIM_NATIVE=1``
(``.ci/run`` builds it and sets that), as the other native parts' tests do.
"""

from __future__ import annotations

import os

import pytest

from sim.cache_impl import BlockCache, native_class
from sim.kvcache import PrefixCache

IMPLEMENTATIONS = ("python", "c")


def cache_class(name: str) -> type[BlockCache]:
    """The implementation called ``name``; skips (or fails) the test without the C build."""
    if name == "python":
        return PrefixCache
    native = native_class()
    if native is not None:
        return native
    if os.environ.get("CACHEROUTE_REQUIRE_SIM_NATIVE") == "1":
        pytest.fail("CACHEROUTE_REQUIRE_SIM_NATIVE=1 but the C prefix cache is not built or stale")
    pytest.skip("the C prefix cache is not built: run .venv/bin/python scripts/build_sim_native.py")
