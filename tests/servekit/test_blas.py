"""The servers ask numpy's OpenBLAS for one thread before numpy loads (servekit/blas.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servekit.blas import BLAS_THREAD_VARIABLES, limit_blas_threads


def test_one_thread_is_asked_for_when_nothing_chose() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    limit_blas_threads(env)
    assert env == {"PATH": "/bin", "OPENBLAS_NUM_THREADS": "1"}


@pytest.mark.parametrize("name", BLAS_THREAD_VARIABLES)
def test_an_operators_choice_wins(name: str) -> None:
    env = {name: "8"}
    limit_blas_threads(env)
    assert env == {name: "8"}


@pytest.mark.parametrize("module", ["dataplane", "controlplane", "simengine"])
def test_each_entry_point_sets_it_before_numpy_loads(module: str) -> None:
    # The entry point run as ``python -m`` runs it: numpy must not be loaded when the limit is set
    # (the router and control plane load it at import, the simulated engines when they start).
    probe = (
        "import sys, runpy\n"
        "import servekit.blas as blas\n"
        "real = blas.limit_blas_threads\n"
        "def spy(environ=None):\n"
        "    print('numpy loaded first' if 'numpy' in sys.modules else 'numpy not yet loaded')\n"
        "    real(environ)\n"
        "blas.limit_blas_threads = spy\n"
        f"runpy.run_module('{module}.__main__', run_name='probe')\n"
        "import os\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["numpy not yet loaded", "1"]
