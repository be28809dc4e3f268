"""What a routing policy sees: membership, per-node load with in-flight correction, the table.

Load is the last snapshot's running + waiting requests per node plus this router's own decisions
made after the snapshot was observed (the in-flight correction), so a burst between two load
polls does not all land on the node that looked idle. A decision stops counting once a snapshot
observed after it arrives (the snapshot now includes it) or after ``correction_horizon_s`` (so a
router cut off from snapshots does not inflate loads forever).

Panic threshold (as Envoy's): when fewer than ``panic_threshold`` of the undrained nodes are
healthy, the view treats every undrained node as healthy (``panic`` is set): a partial outage of
the health signal itself (a control-plane failover, agents reconnecting) must degrade routing,
not black it out. ``reported_healthy`` keeps what the snapshot said. Off (0) unless set: the
live router sets :data:`DEFAULT_PANIC_THRESHOLD`.

Membership and the table's binding to it: :mod:`dataplane.core.node_set` (re-exported here).

Ejection (passive health, :mod:`dataplane.core.outliers`): nodes this router saw failing
(:meth:`LoadView.set_ejected`) are removed from the set the panic rule chose (the healthy
undrained nodes, or all undrained ones in panic), unless that would leave none eligible: then
ejection is ignored, so it can narrow a pool but never empty it.

Completion-aware load: a decision the caller promises to release (:meth:`LoadView.hold_last`,
used by the HTTP front and by ``Route`` with ``hold_until_release``) does not decay; it counts
until :meth:`LoadView.release`. Between snapshots a node's load is then snapshot + dispatched −
released: a held request dispatched after the snapshot adds one until released; a release of a
request the snapshot still counts (dispatched before it) subtracts one until a snapshot observed
after the release arrives (or the horizon passes, like a decision's correction).

The same class serves the live router (wall-clock seconds) and the simulator (simulated seconds):
every time argument is in the caller's clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dataplane.core.eligibility import eligibility
from dataplane.core.node_set import BoundTable, NodeSet, bind_table
from dataplane.core.table import RoutingTable

__all__ = [
    "DEFAULT_PANIC_THRESHOLD",
    "MEMO_LIMIT",
    "BoundTable",
    "LoadView",
    "MemoBoundTable",
    "NoEligibleNodeError",
    "NodeSet",
    "bind_table",
    "bind_with_memo",
]

F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_PANIC_THRESHOLD = 0.5


class NoEligibleNodeError(RuntimeError):
    """No node is healthy and undrained, so nothing can be routed."""


MEMO_LIMIT = 65_536


@dataclass(frozen=True, eq=False)
class MemoBoundTable(BoundTable):
    """A BoundTable that remembers the destinations of keys it was asked about recently.

    The table and its binding never change, so a key's destinations do not either; traffic is
    heavily skewed, so most lookups are repeats. A repeat costs a dict lookup instead of a binary
    search and four numpy calls (several µs in a busy server, where the 8 MB hash array is not
    in cache). Bounded: past MEMO_LIMIT keys the memo starts over.
    """

    memo: dict[int, tuple[int, ...] | None] = field(default_factory=dict, repr=False)

    def members(self, key_hash: int) -> tuple[int, ...] | None:
        memo = self.memo
        found = memo.get(key_hash, _MISSING)
        if found is _MISSING:
            found = BoundTable.members(self, key_hash)
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key_hash] = found
        return found


_MISSING: tuple[int, ...] = (-2,)


def bind_with_memo(table: RoutingTable | None, nodes: NodeSet) -> MemoBoundTable | None:
    """``table`` bound to ``nodes`` (see :func:`~dataplane.core.node_set.bind_table`), memoized."""
    if table is None:
        return None
    bound = bind_table(table, nodes)
    return MemoBoundTable(bound.table, bound.nodes, bound.to_node)


class LoadView:
    """Per-node load (snapshot + in-flight correction), health, drain state and the table."""

    def __init__(
        self,
        nodes: NodeSet,
        *,
        table: RoutingTable | None = None,
        correction_horizon_s: float = 5.0,
        max_pending: int = 1_000_000,
        panic_threshold: float = 0.0,
    ) -> None:
        size = len(nodes)
        self.nodes = nodes
        self.loads: list[float] = [0.0] * size  # snapshot + correction: what policies compare
        self.healthy: list[bool] = [True] * size  # what policies read (all undrained in panic)
        self.reported_healthy: list[bool] = [True] * size
        self.panic_threshold = panic_threshold
        self.panic = False
        self.draining: list[bool] = [False] * size
        self.ejected: frozenset[int] = frozenset()  # passive health: this router's own verdict
        # healthy and not draining; replaced (never mutated) on a change, so policies may cache
        # per-object derivations such as a bitmask
        self.eligible_nodes: tuple[int, ...] = tuple(range(size))
        self.all_eligible = True  # every node healthy and undrained: policies may skip filtering
        self.table: BoundTable | None = None
        self.snapshot_observed_at = float("-inf")
        self._base: list[float] = [0.0] * size
        self._pending: deque[tuple[float, int]] = deque()
        self._horizon = correction_horizon_s
        self._max_pending = max_pending
        self._held: dict[int, tuple[float, int]] = {}  # token → (dispatched at, node)
        self._releases: deque[tuple[float, int]] = deque()  # releases a snapshot still counts
        self._next_token = 0
        if table is not None:
            self.set_table(table)

    # -- what policies read -------------------------------------------------------------------

    def is_eligible(self, node: int) -> bool:
        return node >= 0 and self.healthy[node] and not self.draining[node]

    def in_flight(self, node: int) -> int:
        """Decisions for ``node`` still counted as correction."""
        return sum(1 for _, n in self._pending if n == node)

    def held(self, node: int) -> int:
        """Held (completion-aware) requests dispatched to ``node`` and not released yet."""
        return sum(1 for _, n in self._held.values() if n == node)

    # -- what routers and the simulator write -------------------------------------------------

    def record(self, node: int, now: float) -> None:
        """Count a decision for ``node`` made at ``now`` until a snapshot reflects it."""
        self.loads[node] += 1.0
        pending = self._pending
        pending.append((now, node))
        cutoff = now - self._horizon
        releases = self._releases
        if (
            pending[0][0] < cutoff
            or len(pending) > self._max_pending
            or (releases and releases[0][0] < cutoff)
        ):
            self._expire(cutoff)

    def hold_last(self, node: int, now: float) -> int:
        """Turn a decision recorded for ``node`` at ``now`` into a held one; returns its token.

        The decision stops decaying: it counts until :meth:`release` (or a snapshot covers it).
        """
        pending = self._pending
        entry = (now, node)
        if pending and pending[-1] == entry:
            pending.pop()
        else:  # a batch: search back for it; or it expired already (max_pending): count it again
            for back in range(len(pending) - 1, -1, -1):
                if pending[back] == entry:
                    del pending[back]
                    break
                if pending[back][0] < now:
                    self.loads[node] += 1.0
                    break
            else:
                self.loads[node] += 1.0
        self._next_token += 1
        self._held[self._next_token] = (now, node)
        return self._next_token

    def release(self, token: int, now: float) -> bool:
        """The held request ended at ``now``; False when the token is unknown (released twice)."""
        entry = self._held.pop(token, None)
        if entry is None:
            return False
        dispatched_at, node = entry
        self.loads[node] -= 1.0
        if dispatched_at <= self.snapshot_observed_at:
            releases = self._releases
            releases.append((now, node))  # the snapshot still counts it as running
            if releases[0][0] < now - self._horizon:
                self._expire(now - self._horizon)
        return True

    def apply_snapshot(
        self,
        observed_at: float,
        loads: Sequence[float] | F64Array,
        *,
        healthy: Sequence[bool] | BoolArray | None = None,
        draining: Sequence[bool] | BoolArray | None = None,
    ) -> None:
        """Install loads observed at ``observed_at`` (aligned with ``nodes``; lists or arrays)."""
        if len(loads) != len(self.nodes):
            raise ValueError(f"{len(loads)} loads for {len(self.nodes)} nodes")
        # Ordering snapshots is the caller's job (the router orders by leader term and seq):
        # a wall-clock check here would let one future-dated snapshot freeze the view.
        self.snapshot_observed_at = observed_at
        if isinstance(loads, np.ndarray):
            self._base = loads.astype(np.float64, copy=False).tolist()
        else:  # the simulator's short lists: no numpy round trip
            self._base = [float(x) for x in loads]
        pending = self._pending
        while pending and pending[0][0] <= observed_at:
            pending.popleft()  # the snapshot already counts these decisions
        releases = self._releases
        while releases and releases[0][0] <= observed_at:
            releases.popleft()  # the snapshot no longer counts these requests
        self._recompute_loads()
        if healthy is not None or draining is not None:
            self.set_states(healthy=healthy, draining=draining)

    def set_states(
        self,
        *,
        healthy: Sequence[bool] | BoolArray | None = None,
        draining: Sequence[bool] | BoolArray | None = None,
    ) -> None:
        reported = np.asarray(self.reported_healthy if healthy is None else healthy, np.bool_)
        drained = np.asarray(self.draining if draining is None else draining, np.bool_)
        if healthy is not None:
            self.reported_healthy = reported.tolist()
        if draining is not None:
            self.draining = drained.tolist()
        found = eligibility(reported, drained, self.ejected, self.panic_threshold)
        self.panic = found.panic
        self.healthy = found.healthy
        if found.eligible != self.eligible_nodes:  # same set: policies keep their derivations
            self.eligible_nodes = found.eligible
        self.all_eligible = len(found.eligible) == len(self.nodes)

    def set_ejected(self, ejected: frozenset[int]) -> None:
        """Exclude ``ejected`` (node indices) from routing, within the rule above."""
        if ejected != self.ejected:
            self.ejected = ejected
            self.set_states()

    def forget_loads(self, nodes: Sequence[int] | None = None) -> None:
        """Treat the snapshot loads of ``nodes`` (all: None) as unknown: only this router's own
        in-flight decisions count for them (their data is too old to trust)."""
        forgotten = set(range(len(self.nodes)) if nodes is None else nodes)
        for node in forgotten:
            self._base[node] = 0.0
        # releases corrected the forgotten snapshot counts; without those counts they go too
        self._releases = deque(r for r in self._releases if r[1] not in forgotten)
        self._recompute_loads()

    def set_table(self, table: RoutingTable | None) -> None:
        """Swap the table (one reference assignment after binding)."""
        self.table = None if table is None else bind_table(table, self.nodes)

    # -- internals ----------------------------------------------------------------------------

    def _expire(self, cutoff: float) -> None:
        pending = self._pending
        loads = self.loads
        while pending and (pending[0][0] <= cutoff or len(pending) > self._max_pending):
            _, node = pending.popleft()
            loads[node] -= 1.0
        releases = self._releases
        while releases and releases[0][0] <= cutoff:
            _, node = releases.popleft()
            loads[node] += 1.0

    def _recompute_loads(self) -> None:
        loads = list(self._base)
        for _, node in self._pending:
            loads[node] += 1.0
        observed_at = self.snapshot_observed_at
        for dispatched_at, node in self._held.values():
            if dispatched_at > observed_at:
                loads[node] += 1.0
        for _, node in self._releases:
            loads[node] -= 1.0
        self.loads = loads
