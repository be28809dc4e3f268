"""How unevenly load is spread: the coefficient of variation the field reports routers by.

One formula for the router's gauge (:mod:`dataplane.telemetry.affinity`) and the simulator's
delivered-affinity numbers (:mod:`sim.affinity`), so both say the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def load_cov(loads: Sequence[float]) -> float:
    """Population standard deviation ÷ mean of ``loads``; 0 for none or an all-idle fleet."""
    if not loads:
        return 0.0
    mean = math.fsum(loads) / len(loads)
    if mean <= 0:
        return 0.0
    return math.sqrt(math.fsum((x - mean) ** 2 for x in loads) / len(loads)) / mean
