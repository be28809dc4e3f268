"""One BLAS thread for CacheRoute's processes: they use numpy for vector work, never for BLAS.

numpy's OpenBLAS starts a thread per core when numpy is first imported and each one spins before
it sleeps: ≈ 0.14 s of CPU per process start on two cores (more on a big machine) for threads that
nothing uses (no matrix product runs in a router, control plane, simulated engine or simulation).
OpenBLAS reads its thread count once, when it loads, so :func:`limit_blas_threads` must run
before the first ``import numpy``: the servers' ``__main__`` modules call it first thing.
An operator's own ``OPENBLAS_NUM_THREADS`` (or ``OMP_NUM_THREADS``) wins.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def limit_blas_threads(environ: MutableMapping[str, str] | None = None) -> None:
    """Ask for one BLAS thread unless the environment already chose (module docstring)."""
    env = os.environ if environ is None else environ
    if not any(name in env for name in BLAS_THREAD_VARIABLES):
        env["OPENBLAS_NUM_THREADS"] = "1"
