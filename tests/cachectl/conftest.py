"""Fixtures of the cachectl tests: a control plane on the state twin and a CLI driving it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import structlog

from controlplane.server import ControlPlane
from tests.support.cli import Cli
from tests.support.controlplane import fast_config, running


@pytest.fixture
def quiet_server_logs() -> Iterator[None]:
    """The in-process control plane logs elsewhere than the CLI output under test."""
    with open(os.devnull, "w") as sink:
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sink))
        yield
    structlog.reset_defaults()


@pytest.fixture
async def plane(state_url: str, quiet_server_logs: None) -> AsyncIterator[ControlPlane]:
    async with running(fast_config(state_url)) as started:
        yield started


@pytest.fixture
def cli(plane: ControlPlane, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(plane, capsys)
