"""The one wall clock of the services, injectable where time matters to a test.

Control-plane records (reports, pointers, audit events, plans) carry wall-clock milliseconds;
code that stamps them takes a :data:`Clock` (default :func:`wall_ms`) instead of reading the time
itself, so a test can pin or advance it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Wall-clock milliseconds since the Unix epoch."""


def wall_ms() -> int:
    return int(time.time() * 1000)
