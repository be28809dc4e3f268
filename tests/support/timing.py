"""Timing claims on a machine that may be busy: the test's own measured schedule lag decides
whether a missed bound is the product's fault (fail) or the machine's (skip, with the numbers).

Some bounds are the product's promise (a killed engine is routed around within a second of its
agent noticing; a lease is taken over within its TTL plus a renewal). On a 2-core machine under
a CPU hog every process waits for a core, and such a bound can be missed while the product is
fine. :class:`LagMeter` measures that wait from inside the test: a thread naps 10 ms over and
over and records how late it wakes. :meth:`LagMeter.claim` checks a bound: when it holds, fine;
when it is missed and the meter saw the machine starve this process (one wake-up late by more
than ``WORST_S``, or more than ``SHARE`` of the time lost to late wake-ups), the test is skipped
with the measured lag; otherwise it fails, saying the machine was not busy.

Counts of work done in a wall-clock window are never claimed: wait for the count instead
(:func:`tests.support.polling.eventually`).

Start deadlines (a subprocess, Envoy, a Redis cluster coming up) are patience, not promises, yet a
fixed number of seconds is a claim about the machine: on a loaded one it fails tests whose answer
was right (issue 34). :class:`StartDeadline` counts only the seconds the machine gave this process:
its meter's late wake-ups are subtracted, so a wait on a starved machine stretches with the
measured starvation, up to :data:`CAP_S`, below the suite's per-test hang guard.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import pytest

NAP_S = 0.01
WORST_S = 0.1  # one wake-up this late: the process had no core for 100 ms
SHARE = 0.1  # or a tenth of the time lost to late wake-ups
CAP_S = 600.0  # a start deadline never waits longer (pyproject's per-test guard is 900 s)

T = TypeVar("T")


class LagMeter:
    """Schedule lag of this process while it runs (module docstring); a context manager."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.late_s = 0.0
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-meter", daemon=True)

    def start(self) -> LagMeter:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.monotonic()
            time.sleep(NAP_S)
            late = time.monotonic() - before - NAP_S
            if late > 0:
                self.late_s += late
                self.worst_s = max(self.worst_s, late)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    @property
    def starved(self) -> bool:
        return self.worst_s > WORST_S or self.late_s > SHARE * max(self.elapsed_s, NAP_S)

    def describe(self) -> str:
        return (
            f"a {NAP_S * 1000:.0f} ms nap woke up to {self.worst_s * 1000:.0f} ms late; "
            f"{self.late_s:.2f} s of {self.elapsed_s:.1f} s lost to late wake-ups"
        )

    def claim(self, holds: bool, what: str) -> None:
        """Check a timing bound ``what`` (module docstring: fail, or skip when starved)."""
        if holds:
            return
        if self.starved:
            pytest.skip(f"{what}: missed on a busy machine, not judged ({self.describe()})")
        pytest.fail(f"{what}: missed, and the machine was not busy ({self.describe()})")

    def __enter__(self) -> LagMeter:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class StartDeadline:
    """``base_s`` seconds of the machine's time to start something (module docstring); a context
    manager that runs its own :class:`LagMeter` unless given one. ``clock`` is for its tests."""

    def __init__(
        self,
        base_s: float,
        *,
        meter: LagMeter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_s = base_s
        self._own = meter is None
        self.meter = meter if meter is not None else LagMeter()
        self._clock = clock
        self._started = clock()
        self._late_before = self.meter.late_s

    def __enter__(self) -> StartDeadline:
        if self._own:
            self.meter.start()
        self._started = self._clock()
        self._late_before = self.meter.late_s
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self.meter.stop()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    @property
    def lost_s(self) -> float:
        """Seconds of this wait the meter saw lost to late wake-ups (a busy machine)."""
        return self.meter.late_s - self._late_before

    def expired(self) -> bool:
        elapsed = self.elapsed_s
        return elapsed > CAP_S or elapsed - self.lost_s > self.base_s

    def describe(self) -> str:
        return (
            f"{self.elapsed_s:.1f} s, {self.lost_s:.1f} s of them lost to a busy machine "
            f"(patience: {self.base_s:g} s of the machine's time, at most {CAP_S:g} s)"
        )


async def patiently(
    wait: Callable[[float], Awaitable[T]], base_s: float, *, gives_up: type[Exception]
) -> T:
    """Await ``wait(timeout_s)``, a wait that takes its patience in fixed seconds (e.g.
    ``LocalCluster.wait_ready``), with :class:`StartDeadline` patience instead: when it gives up
    (raises ``gives_up``) before the deadline's machine-seconds are spent, it is called again
    with what is left, so time the machine took from this process is not counted."""
    with StartDeadline(base_s) as deadline:
        while True:
            left = max(
                1.0, min(CAP_S - deadline.elapsed_s, base_s - deadline.elapsed_s + deadline.lost_s)
            )
            try:
                return await wait(left)
            except gives_up:
                if deadline.expired():
                    raise


GUARD_NAP_S = 1.0  # the hang guard's thread wakes once a second: no measurable CPU
GUARD_CAP = 3.0  # however starved the machine, a hang guard fires at 3x its seconds


class HangGuard:
    """The per-test hang guard (pyproject's ``timeout``, ``@pytest.mark.timeout``) in the
    machine's seconds, like :class:`StartDeadline`: a thread naps ``nap_s`` over and over, counts
    its late wake-ups as seconds the machine did not give this process, and calls ``expire``
    once ``timeout_s`` of the remaining seconds have passed (or ``GUARD_CAP`` times that in all).
    A fixed guard failed two right answers at load 22-38 on two cores (issue 34)."""

    def __init__(
        self, timeout_s: float, expire: Callable[[], None], *, nap_s: float = GUARD_NAP_S
    ) -> None:
        self.timeout_s = timeout_s
        self.nap_s = nap_s
        self.lost_s = 0.0
        self.fired = False
        self._expire = expire
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-guard", daemon=True)

    def start(self) -> HangGuard:
        self._thread.start()
        return self

    def cancel(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.nap_s + 1.0)

    def _run(self) -> None:
        started = last = time.monotonic()
        while not self._stop.wait(self.nap_s):
            now = time.monotonic()
            self.lost_s += max(0.0, now - last - self.nap_s)
            last = now
            elapsed = now - started
            if elapsed > GUARD_CAP * self.timeout_s or elapsed - self.lost_s > self.timeout_s:
                self.fired = True
                self._expire()
                return


def run_patiently(
    args: Sequence[str],
    *,
    timeout: float,
    check: bool = False,
    capture_output: bool = False,
    **popen: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(args, timeout=...)`` with ``timeout`` in the machine's seconds
    (:class:`StartDeadline`): a Python process that only parses its flags can take a minute to
    start on a starved machine (issue 34). On expiry the child is killed and
    ``subprocess.TimeoutExpired`` raised, as ``subprocess.run`` does."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with StartDeadline(timeout) as deadline, subprocess.Popen(args, **popen) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if deadline.expired():
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(args, deadline.elapsed_s, out, err) from None
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
