"""The schedule-lag meter that timing bounds are claimed through (tests/support/timing.py):
a held bound passes, a missed one fails on an idle machine and skips on a starved one."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.timing import CAP_S, HangGuard, LagMeter, StartDeadline, patiently


def test_a_held_bound_passes_and_a_missed_one_fails_when_the_machine_was_idle() -> None:
    meter = LagMeter()  # not started: it saw no lag
    meter.claim(True, "held")
    with pytest.raises(pytest.fail.Exception, match="the machine was not busy"):
        meter.claim(False, "missed")


def test_a_missed_bound_on_a_starved_machine_is_skipped_with_the_numbers() -> None:
    meter = LagMeter()
    meter.worst_s = 0.4  # as when this process waited 400 ms for a core
    with pytest.raises(pytest.skip.Exception, match=r"busy machine.*400 ms late"):
        meter.claim(False, "missed")


def test_the_meter_measures_late_wake_ups_of_its_own_thread() -> None:
    with LagMeter() as meter:
        time.sleep(0.2)
    assert meter.elapsed_s >= 0.2
    assert meter.worst_s >= 0.0 and meter.late_s >= 0.0


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_start_deadline_counts_only_the_seconds_the_machine_gave() -> None:
    """Issue 34: fixed start deadlines failed right answers on a loaded machine."""
    clock, meter = _Clock(), LagMeter()  # not started: its numbers are set by hand
    meter.late_s = 3.0  # lag seen before the wait began does not count
    deadline = StartDeadline(10.0, meter=meter, clock=clock)
    clock.now += 9.0
    assert not deadline.expired()
    clock.now += 2.0  # 11 s, none lost: an idle machine gets its 10 s
    assert deadline.expired()
    meter.late_s += 5.0  # 5 of those 11 s were lost to a busy machine: 6 s used
    assert not deadline.expired() and deadline.lost_s == 5.0
    clock.now += 4.5  # 15.5 s, 10.5 used
    assert deadline.expired()
    assert "15.5 s, 5.0 s of them lost to a busy machine" in deadline.describe()
    meter.late_s += 10_000.0  # however starved, never past the cap
    clock.now = 100.0 + CAP_S + 1.0
    assert deadline.expired()


class _GaveUpError(Exception):
    pass


async def test_a_wait_with_fixed_seconds_is_called_again_while_the_machine_owes_it_time() -> None:
    """``patiently``: a wait that gives up (``LocalCluster.wait_ready(timeout_s)``) before the
    start deadline's machine-seconds are spent is called again with what is left; once they are
    spent its error stands."""
    asked: list[float] = []

    async def gives_up_once(timeout_s: float) -> str:
        asked.append(timeout_s)
        if len(asked) == 1:
            raise _GaveUpError
        return "ready"

    assert await patiently(gives_up_once, 30.0, gives_up=_GaveUpError) == "ready"
    assert len(asked) == 2 and all(1.0 <= t <= 30.0 for t in asked)

    async def never(timeout_s: float) -> str:
        await asyncio.sleep(0.01)
        raise _GaveUpError

    with pytest.raises(_GaveUpError):
        await patiently(never, 0.0, gives_up=_GaveUpError)


def test_the_hang_guard_fires_after_its_seconds_and_not_once_cancelled() -> None:
    """The per-test guard (conftest's pytest-timeout hook) in the machine's seconds."""
    fired = threading.Event()
    guard = HangGuard(0.05, fired.set, nap_s=0.01).start()
    assert fired.wait(5.0) and guard.fired
    guard.cancel()
    quiet = threading.Event()
    cancelled = HangGuard(0.3, quiet.set, nap_s=0.01).start()
    cancelled.cancel()
    time.sleep(0.4)
    assert not quiet.is_set() and not cancelled.fired
