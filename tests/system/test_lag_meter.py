"""The schedule-lag meter that timing bounds are claimed through (tests/support/timing.py):
a held bound passes, a missed one fails on an idle machine and skips on a starved one."""

from __future__ import annotations

import time

import pytest

from tests.support.timing import LagMeter


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
