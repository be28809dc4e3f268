"""Which prefix KV cache the simulator runs: the C build when it is current, else the Python one.

:class:`sim.kvcache.PrefixCache` is the reference; ``sim._prefix_cache.PrefixCache``
(``native/simcache/prefix_cache.c``, built by ``scripts/build_sim_native.py``) gives the same
answers in about a tenth of the time, and the simulator spends most of its time there. The C
module is used only when its compiled-in source digest is the current source's (an edited source
is never served by a stale build) and ``CACHEROUTE_SIM_CACHE`` is not ``python``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sysconfig
import warnings
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

from sim.kvcache import PrefixCache

SOURCE = Path(__file__).resolve().parents[1] / "native" / "simcache" / "prefix_cache.c"
FORCE_PYTHON_ENV = "CACHEROUTE_SIM_CACHE"  # "python": always the reference class


class BlockCache(Protocol):
    """What the simulator's nodes call on a cache (both implementations)."""

    reserved: int
    evictions: int

    def __init__(self, capacity_blocks: int) -> None: ...
    @property
    def capacity(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def pinned(self) -> int: ...
    def __contains__(self, block: int) -> bool: ...
    def __len__(self) -> int: ...
    def match(self, blocks: Sequence[int]) -> tuple[int, int]: ...
    def admit(self, blocks: Sequence[int], hit: int, unpinned: int, reserve: int) -> bool: ...
    def fill(self, blocks: Sequence[int]) -> None: ...
    def store(self, blocks: Sequence[int], reserved: int) -> int: ...
    def warm(self, recent_first: Sequence[int]) -> None: ...
    def release(self, blocks: Sequence[int], reserved: int) -> None: ...


def native_path() -> Path:
    """Where the build puts the C module (beside this file, as an in-place extension)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return Path(__file__).with_name(f"_prefix_cache{suffix}")


def source_digest() -> str | None:
    """SHA-256 of the C source, or None where it is not shipped (then any build is trusted)."""
    try:
        return hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    except OSError:
        return None


@cache
def native_class() -> type[BlockCache] | None:
    """The C class when it is built and current, else None (the reason is warned once)."""
    if os.environ.get(FORCE_PYTHON_ENV, "").strip().lower() == "python":
        return None
    try:
        module = importlib.import_module("sim._prefix_cache")
    except ImportError:
        return None  # not built (no compiler): the Python class, same answers
    wanted = source_digest()
    if wanted is not None and wanted != module.SOURCE_DIGEST:
        warnings.warn(
            f"{native_path().name} was built from another prefix_cache.c; the simulator runs the "
            "Python cache until `.venv/bin/python scripts/build_sim_native.py` rebuilds it",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    found: type[BlockCache] = module.PrefixCache
    return found


def cache_class() -> type[BlockCache]:
    """The class the simulator instantiates."""
    return native_class() or PrefixCache


def new_prefix_cache(capacity_blocks: int) -> BlockCache:
    """A destination's empty cache of ``capacity_blocks`` blocks."""
    return cache_class()(capacity_blocks)
