"""The simulator runs the C prefix cache only when it is built from the current source."""

from __future__ import annotations

import pytest

import sim.cache_impl
from sim.cache_impl import cache_class, native_class, native_path, source_digest
from sim.kvcache import PrefixCache
from tests.support.scripts import load_script
from tests.support.sim_cache import cache_class as implementation


def test_the_simulator_runs_the_c_cache_when_it_is_built() -> None:
    native = implementation("c")  # skips without the build, fails under the CI requirement
    assert cache_class() is native
    node_cache = sim.cache_impl.new_prefix_cache(8)
    assert isinstance(node_cache, native)


def test_the_build_on_disk_is_the_current_sources() -> None:
    implementation("c")
    build = load_script("scripts/build_sim_native.py")
    assert build.built_digest(native_path()) == source_digest()


def test_a_stale_build_is_not_used_and_says_how_to_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    implementation("c")
    monkeypatch.setattr(sim.cache_impl, "source_digest", lambda: "0" * 64)
    native_class.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="build_sim_native.py"):
            assert native_class() is None
        assert cache_class() is PrefixCache
    finally:
        native_class.cache_clear()


def test_the_environment_can_force_the_python_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sim.cache_impl.FORCE_PYTHON_ENV, "python")
    native_class.cache_clear()
    try:
        assert cache_class() is PrefixCache
    finally:
        native_class.cache_clear()
