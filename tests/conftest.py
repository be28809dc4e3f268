"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"


@pytest.fixture
def traces_dir() -> Path:
    """../shared/traces beside the project; tests that need it skip when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"trace folder {TRACES} is absent (it sits beside the project in CI)")
    return TRACES
