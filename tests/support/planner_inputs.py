"""Small hand-checked planner inputs for the planner's tests: three destinations, rates by key.

Shared by the tests of Algorithm 1, of the plan's statistics and of the placements.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from controlplane.core.planner import (
    PlanInput,
    build_plan,
)
from dataplane.core.table import RoutingTable

NODES = ["a", "b", "c"]


def plan(rates: dict[int, float], *, nodes: list[str] | None = None, **kwargs: Any) -> RoutingTable:
    args: dict[str, Any] = {"q_cap": 10.0, "slots_per_node": 2, **kwargs}
    return build_plan(
        PlanInput(
            key_hashes=np.array(list(rates), dtype=np.uint64),
            rates=np.array(list(rates.values()), dtype=np.float64),
            node_ids=nodes or NODES,
            **args,
        ),
        created_at_unix_ms=1,
    )


def sets(table: RoutingTable) -> dict[int, list[int]]:
    return {int(h): table.members(i) for i, h in enumerate(table.key_hashes)}
