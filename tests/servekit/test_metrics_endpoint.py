"""The /metrics endpoint: serves scrapes from its own thread, sleeps between them, closes fast."""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from servekit.gil import FAST_SWITCH_INTERVAL_S, fast_switching
from servekit.metrics_endpoint import MetricsEndpoint
from tests.support.timing import LagMeter


def _switches_of(thread_name: str) -> int:
    """Context switches of the named thread of this process so far (Linux): one per wake-up."""
    native = next(t.native_id for t in threading.enumerate() if t.name == thread_name)
    status = Path(f"/proc/{os.getpid()}/task/{native}/status").read_text()
    return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)


def test_it_serves_the_registry_and_closes_promptly_and_idempotently(lag: LagMeter) -> None:
    registry = CollectorRegistry()
    Counter("things", "things seen", registry=registry).inc(3)
    endpoint = MetricsEndpoint(registry)
    for _ in range(3):  # one connection after another, each on its own handler thread
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            assert "things_total 3.0" in response.read().decode()
    started = time.monotonic()
    endpoint.close()
    # Promptly: the thread is woken, not polled (a hung close would hit this; the idle test below
    # checks the wake-up mechanism itself, so this bound is loose for loaded machines).
    lag.claim(time.monotonic() - started < 5.0, "close returned within 5 s")
    endpoint.close()
    assert not any(t.name == "metrics-endpoint" for t in threading.enumerate())


def test_the_idle_endpoint_thread_sleeps_instead_of_polling() -> None:
    endpoint = MetricsEndpoint(CollectorRegistry())
    try:
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            assert response.status == 200
        before = _switches_of("metrics-endpoint")
        time.sleep(0.5)  # a 20 ms poll would wake it ~25 times
        assert _switches_of("metrics-endpoint") - before <= 2
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            assert response.status == 200  # and a scrape still wakes it
    finally:
        endpoint.close()


def test_fast_switching_lowers_the_interval_only_while_some_thread_is_inside() -> None:
    default = sys.getswitchinterval()
    inside = threading.Event()
    leave = threading.Event()

    def worker() -> None:
        with fast_switching():
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(5)
    assert sys.getswitchinterval() == FAST_SWITCH_INTERVAL_S
    with fast_switching():  # nested with the worker's: still fast after this one leaves
        pass
    assert sys.getswitchinterval() == FAST_SWITCH_INTERVAL_S
    leave.set()
    thread.join(5)
    assert sys.getswitchinterval() == default
