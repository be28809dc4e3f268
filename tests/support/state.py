"""Running a logic test on the in-memory state twin, or on a real Redis.

A module whose logic does not need Redis overrides ``stores`` with the ``state_stores`` fixture
and takes ``state_url`` where it used to take ``redis_url``; its tests then run on the twin, in
milliseconds. At least one test per component stays on a real ``redis-server``: decorate it
with :func:`on_redis`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])


def on_redis(test: F) -> F:
    """Run ``test`` against the session's real redis-server instead of the twin."""
    marked: F = pytest.mark.redis(
        pytest.mark.parametrize("state_url", ["redis"], indirect=True)(test)
    )
    return marked
