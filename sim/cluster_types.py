"""The parts of a simulated cluster that the event loop and its helpers both name.

The run's configuration and one simulated router live here, below :mod:`sim.cluster` and the
modules it uses (warm-up, tree sync, result summaries), so imports run one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataplane.core.load_view import LoadView
from dataplane.core.policies import Policy
from sim.engine_model import EngineProfile

DEFAULT_SNAPSHOT_S = 0.25
DEFAULT_TIMEOUT_S = 30.0
FRONTS = ("round_robin", "key", "session")


@dataclass(frozen=True)
class ClusterConfig:
    """How one run is simulated (everything except the requests, the policy and its table)."""

    profile: EngineProfile
    nodes: int = 30
    routers: int = 1
    snapshot_interval_s: float = DEFAULT_SNAPSHOT_S
    warmup_s: float = 0.0
    timeout_s: float = DEFAULT_TIMEOUT_S
    abort_above_s: float | None = None
    seed: int = 0
    drain_all: bool = False  # run until every request finished decoding (tests, accounting)
    cache_outputs: bool = True  # finished requests' full output blocks join the cache (vLLM V1)
    policy_params: dict[str, Any] = field(default_factory=dict)
    front: str = "round_robin"  # how requests reach routers: round_robin, key, session
    echo_tokens: bool = True  # multi-turn clients echo their conversation's session token
    tree_sync_s: float | None = None  # prefix-history trees synced across routers every S

    def node_ids(self) -> list[str]:
        return [f"d{i:03d}" for i in range(self.nodes)]


class SimRouter:
    """One simulated router: its own policy instance and its own load view."""

    __slots__ = ("policy", "view")

    def __init__(self, policy: Policy, view: LoadView) -> None:
        self.policy = policy
        self.view = view
