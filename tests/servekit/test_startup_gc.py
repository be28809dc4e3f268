"""Each server pauses the cyclic GC while it starts and freezes what start-up built once it serves
(servekit/startup_gc.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from servekit import startup_gc


@pytest.fixture
def collector() -> Iterator[None]:
    """This worker's collector as it was, whatever the test does to it."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    startup_gc._State.paused = False
    if enabled:
        gc.enable()


@pytest.mark.usefixtures("collector")
def test_pause_then_freeze_puts_the_start_up_out_of_reach_and_the_collector_back_on() -> None:
    gc.enable()
    startup_gc.pause_for_startup()
    assert not gc.isenabled()
    built = [[i] for i in range(1000)]  # what a start-up allocates and keeps
    startup_gc.freeze_startup()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


@pytest.mark.usefixtures("collector")
def test_freeze_leaves_a_collector_it_did_not_pause_as_it_was() -> None:
    gc.disable()  # someone else's choice (a test, an embedding program)
    startup_gc.freeze_startup()
    assert not gc.isenabled()


def _probe(module: str, argv: list[str]) -> str:
    """Run ``module`` as ``python -m`` would, with ``freeze_startup`` wrapped to report the
    collector before and after it, then SIGTERM: the server stops as it would in production."""
    return (
        "import gc, os, runpy, signal, sys\n"
        "import servekit.startup_gc as startup_gc\n"
        "real = startup_gc.freeze_startup\n"
        "def spy():\n"
        "    print('paused' if not gc.isenabled() else 'running', flush=True)\n"
        "    real()\n"
        "    frozen = gc.get_freeze_count()\n"
        "    print('enabled' if gc.isenabled() else 'disabled', frozen > 10000, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "startup_gc.freeze_startup = spy\n"
        f"sys.argv = ['{module}', *{argv!r}]\n"
        f"runpy.run_module('{module}', run_name='__main__', alter_sys=True)\n"
    )


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("simengine", ["--listen", "127.0.0.1:0"]),
        ("agents", ["--controlplane", "127.0.0.1:9", "--engine-url", "http://127.0.0.1:9"]),
        ("controlplane", ["--listen", "127.0.0.1:0", "--metrics-listen", ""]),
    ],
)
def test_each_server_starts_with_the_collector_paused_and_serves_with_it_on(
    module: str, argv: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _probe(module, argv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[:2] == ["paused", "enabled True"], done.stdout + done.stderr


def test_the_router_starts_with_the_collector_paused_and_serves_with_it_on(redis_url: str) -> None:
    argv = ["--listen", "127.0.0.1:0", "--redis-url", redis_url, "--metrics-listen", ""]
    done = subprocess.run(
        [sys.executable, "-c", _probe("dataplane", argv)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.splitlines()[:2] == ["paused", "enabled True"], done.stdout + done.stderr
