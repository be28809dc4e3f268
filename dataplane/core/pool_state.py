"""What the router holds per pool: policy, load view, applied table and load order, counters.

Apart from the decision (:mod:`dataplane.core.router`): watchers replace a pool's ``view`` and
table fields here with one reference assignment each, and the decision only reads them.
"""

from __future__ import annotations

from typing import Protocol

from dataplane.core.active_probes import ActiveProbes, ProbeConfig
from dataplane.core.heavy_hitters import TrafficCounter
from dataplane.core.load_view import LoadView
from dataplane.core.outcome import RouteOutcome
from dataplane.core.outliers import OutlierConfig, OutlierDetector
from dataplane.core.policies import Policy, Reason
from dataplane.core.session_token import Ignored, SessionTokens
from dataplane.core.table import RoutingTable


class DecisionMetrics(Protocol):
    """Per-pool decision counters (:mod:`dataplane.telemetry.router_metrics`); no-op in benches."""

    def decided(self, reason: Reason, seconds: float) -> None: ...

    def token_ignored(self, why: Ignored) -> None: ...


class _NoMetrics:
    def decided(self, reason: Reason, seconds: float) -> None:
        pass

    def token_ignored(self, why: Ignored) -> None:
        pass


NO_METRICS = _NoMetrics()


class PoolState:
    """Everything the router holds for one pool. Watchers replace ``view`` and the table fields."""

    __slots__ = (
        "load_aged",
        "load_applied_at",
        "load_order",
        "metrics",
        "name",
        "outcomes",
        "outliers",
        "policy",
        "probes",
        "table",
        "table_applied_at",
        "table_generation",
        "table_version",
        "tokens",
        "traffic",
        "uses_blocks",
        "uses_session",
        "view",
    )

    def __init__(
        self,
        name: str,
        policy: Policy,
        view: LoadView,
        traffic: TrafficCounter,
        outliers: OutlierDetector | None = None,
        probes: ActiveProbes | None = None,
    ) -> None:
        self.name = name
        self.outliers = outliers if outliers is not None else OutlierDetector(OutlierConfig(0))
        # Active probes' streaks; their ejections live in ``outliers.probed`` (one cap, one view).
        self.probes = probes if probes is not None else ActiveProbes(ProbeConfig(0))
        self.policy = policy
        # Only policies that declare it read prefix blocks; for the others the router skips
        # hashing the prompt.
        self.uses_blocks = policy.needs_blocks
        self.uses_session = policy.needs_session
        # The valid session tokens under the current membership and generation (built on first
        # use, dropped with ``outcomes``).
        self.tokens: SessionTokens | None = None
        self.view = view
        # (node, reason) → its RouteOutcome under the current table and membership: every field is
        # fixed by those, so a decision reuses one instead of building a tuple (cleared on change).
        self.outcomes: dict[tuple[int, Reason], RouteOutcome] = {}
        self.traffic = traffic
        self.metrics: DecisionMetrics = NO_METRICS
        self.table: RoutingTable | None = None
        self.table_version = ""
        self.table_generation = 0
        self.table_applied_at = 0.0
        self.load_order: tuple[int, int] = (-1, -1)  # (leader_term, seq) applied
        self.load_applied_at = 0.0
        self.load_aged = False  # the snapshot is older than the bound: loads are in-flight only

    def unavailable(self) -> str:
        if len(self.view.nodes) == 0:
            return f"pool {self.name!r} has no destinations yet"
        return f"pool {self.name!r} has no healthy, undrained destination"


def pool_tokens(state: PoolState) -> SessionTokens:
    """The pool's valid session tokens under its current membership and table generation."""
    tokens = state.tokens
    if tokens is None:
        tokens = state.tokens = SessionTokens(
            state.name, state.view.nodes.ids, state.table_generation
        )
    return tokens
