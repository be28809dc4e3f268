"""Fixtures of the control-plane tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.controlplane import ControlPlaneProcess


@pytest.fixture
def processes() -> Iterator[list[ControlPlaneProcess]]:
    started: list[ControlPlaneProcess] = []
    yield started
    for process in started:
        process.kill()
