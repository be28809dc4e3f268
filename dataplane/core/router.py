"""The router's decision: find the pool, ask its policy, answer (no gRPC, no Redis).

Per pool the router holds one :class:`~dataplane.core.pool_state.PoolState`: the policy instance,
the current :class:`~dataplane.core.load_view.LoadView` (membership, loads with in-flight
correction, the bound table), and the applied table's version and generation. Watchers build new
tables and views off to the side and install them with one reference assignment each;
:meth:`Router.route` only reads what is there, so no decision ever waits on I/O. Everything runs on
the server's event loop thread, so a decision sees either the old or the new table, never a mix.
What a decision answers, and its errors, are in :mod:`dataplane.core.outcome` (re-exported here).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from typing import Protocol

from cacheroute.v1 import cluster_pb2
from dataplane.core.active_probes import ActiveProbes, ProbeConfig
from dataplane.core.heavy_hitters import TrafficCounter
from dataplane.core.load_snapshot import read_snapshot
from dataplane.core.load_view import DEFAULT_PANIC_THRESHOLD, LoadView, NodeSet, bind_with_memo
from dataplane.core.names import DEFAULT_POOL, POOL_PATTERN
from dataplane.core.outcome import NoDestinationError, RouteError, RouteOutcome, UnknownPoolError
from dataplane.core.outliers import OutlierConfig, OutlierDetector, apply_ejections
from dataplane.core.policies import Reason, Request, make_policy
from dataplane.core.pool_state import NO_METRICS, DecisionMetrics, PoolState, pool_tokens
from dataplane.core.route_input import RouteInput
from dataplane.core.session_token import Ignored
from dataplane.core.table import RoutingTable

__all__ = [
    "MAX_LOAD_ORDER",
    "NO_METRICS",
    "DecisionMetrics",
    "NoDestinationError",
    "PoolState",
    "RouteError",
    "RouteOutcome",
    "Router",
    "SampleSink",
    "UnknownPoolError",
]


class SampleSink(Protocol):
    """Takes a Bernoulli sample of decisions (see :mod:`dataplane.telemetry.sampler`)."""

    def hit(self) -> bool: ...

    def add(self, inp: RouteInput, outcome: RouteOutcome, now: float) -> None: ...


MAX_LOAD_ORDER = 2**62  # a load snapshot term or seq above this is corrupt or forged
# Per decision: builds a NamedTuple without its constructor's Python frame (~0.25 µs less).
_new = tuple.__new__


class Router:
    """Pools, their state, and the decision (module docstring)."""

    def __init__(
        self,
        *,
        policy: str = "cacheroute",  # servers pass RouterConfig.policy (DEFAULT_POLICY)
        seed: int = 0,
        correction_horizon_s: float = 5.0,
        top_keys: int = 4096,
        sampler: SampleSink | None = None,
        pool_metrics: Callable[[str], DecisionMetrics] | None = None,
        panic_threshold: float = DEFAULT_PANIC_THRESHOLD,
        load_max_age_s: float = 3.0,
        outliers: OutlierConfig | None = None,
        probes: ProbeConfig | None = None,
    ) -> None:
        # fail at start on an unknown name; whether its policy reads conversations (the doors
        # derive a request's conversation id only then)
        self.uses_sessions = make_policy(policy, seed=seed).needs_session
        self.policy_name = policy
        self.seed = seed
        self.correction_horizon_s = correction_horizon_s
        self.panic_threshold = panic_threshold
        self.load_max_age_s = load_max_age_s
        self.outlier_config = outliers if outliers is not None else OutlierConfig(0)
        self.probe_config = probes if probes is not None else ProbeConfig(0)
        self.top_keys = top_keys
        self.sampler = sampler
        self.pools: dict[str, PoolState] = {}
        # Set by the server while it has never synced with the store: why no pool has nodes.
        self.not_synced = ""
        self._pool_metrics = pool_metrics
        self.add_pool(DEFAULT_POOL)

    # -- pools ----------------------------------------------------------------------------------

    def add_pool(self, name: str) -> PoolState:
        """The pool's state, created (no destinations, no table) if the pool is new."""
        state = self.pools.get(name)
        if state is None:
            if not POOL_PATTERN.match(name):
                raise ValueError(f"pool {name!r} does not match {POOL_PATTERN.pattern}")
            # Seeded per pool so pools do not share one random sequence; stable across restarts.
            policy = make_policy(self.policy_name, seed=self.seed ^ zlib.crc32(name.encode()))
            view = self._new_view(NodeSet(()))
            traffic = TrafficCounter(self.top_keys)
            outliers = OutlierDetector(self.outlier_config)
            probes = ActiveProbes(self.probe_config, self.outlier_config.max_ejected_share)
            state = PoolState(name, policy, view, traffic, outliers, probes)
            if self._pool_metrics is not None:
                state.metrics = self._pool_metrics(name)
            self.pools[name] = state
        return state

    def _new_view(self, nodes: NodeSet) -> LoadView:
        return LoadView(
            nodes,
            correction_horizon_s=self.correction_horizon_s,
            panic_threshold=self.panic_threshold,
        )

    # -- decisions ------------------------------------------------------------------------------

    def route(self, inp: RouteInput, now: float, counted: bool = True) -> RouteOutcome:
        """Route one validated request; ``now`` is wall-clock seconds (the snapshots' clock).

        ``counted`` False: routed as usual but its key is not counted for planning (the
        caller is unauthenticated or over its planning rate limit).
        """
        state = self.pools.get(inp.pool)
        if state is None:
            raise UnknownPoolError(f"pool {inp.pool!r} is not known to this router")
        if not state.view.eligible_nodes:
            raise NoDestinationError(self._unavailable(state))
        return self._decide(state, inp, now, counted)

    def route_batch(
        self, inputs: Sequence[RouteInput], now: float, counted: int | None = None
    ) -> list[RouteOutcome]:
        """Route a validated batch: every pool is checked first, so a failing batch routes none.

        ``counted``: only the first ``counted`` requests count for planning (None: all).
        """
        pools = self.pools
        for index, inp in enumerate(inputs):
            state = pools.get(inp.pool)
            if state is None:
                raise UnknownPoolError(f"requests[{index}]: pool {inp.pool!r} is not known")
            if not state.view.eligible_nodes:
                raise NoDestinationError(f"requests[{index}]: {self._unavailable(state)}")
        decide = self._decide
        if counted is None:
            return [decide(pools[inp.pool], inp, now, True) for inp in inputs]
        return [decide(pools[inp.pool], inp, now, i < counted) for i, inp in enumerate(inputs)]

    def _unavailable(self, state: PoolState) -> str:
        if self.not_synced:
            return f"{state.unavailable()}: {self.not_synced}"
        return state.unavailable()

    def _decide(self, state: PoolState, inp: RouteInput, now: float, counted: bool) -> RouteOutcome:
        started = time.perf_counter()
        view = state.view
        blocks = inp.blocks() if state.uses_blocks else ()
        if state.uses_session:
            message = inp.message
            token = message.session_token
            session = self._session(state, token) if token else -1
            # the flow: the conversation (session_id), else the request id, else the token; a
            # policy hashes it only when it needs it
            flow = message.session_id or inp.request_id or token or 0
            request = _new(Request, (inp.key_hash, blocks, session, flow, message.opening_turn))
        else:
            request = _new(Request, (inp.key_hash, blocks, -1, 0, False))
        decision = state.policy.route(request, view, now)
        outcome = state.outcomes.get(decision)
        if outcome is None:
            outcome = state.outcomes[decision] = self._outcome(state, *decision)
        if counted:
            traffic = state.traffic
            if traffic.add(inp.key_hash, inp.key):  # a prefix-size sample is due
                traffic.sizes.sample(inp, request[1] if state.uses_blocks else None)
        sampler = self.sampler
        if sampler is not None and sampler.hit():
            sampler.add(inp, outcome, now)
        state.metrics.decided(decision.reason, time.perf_counter() - started)
        return outcome

    @staticmethod
    def _session(state: PoolState, token: str) -> int:
        """The node a valid session token names, else -1 (the ignored token counted)."""
        found = pool_tokens(state).node(token)
        if isinstance(found, Ignored):
            state.metrics.token_ignored(found)
            return -1
        return found

    @staticmethod
    def _outcome(state: PoolState, node: int, reason: Reason) -> RouteOutcome:
        nodes = state.view.nodes
        return RouteOutcome(
            nodes.ids[node], nodes.addresses[node], reason, state.table_version,
            state.table_generation, pool_tokens(state).by_node[node],
        )  # fmt: skip

    # -- updates from the watchers --------------------------------------------------------------

    def install_table(self, pool: str, table: RoutingTable, generation: int) -> RoutingTable | None:
        """Bind an already validated table to the pool's membership and swap it in.

        Returns the table it replaced, so the caller can let go of it off the serving thread.
        """
        state = self.add_pool(pool)
        previous = state.table
        state.view.table = bind_with_memo(table, state.view.nodes)  # one reference assignment
        state.table = table
        state.table_version = table.version
        state.table_generation = generation
        state.outcomes = {}
        state.tokens = None
        state.table_applied_at = time.time()
        return previous

    def clear_table(self, pool: str, generation: int) -> RoutingTable | None:
        """Serve no table (planned routing disabled) as of ``generation``; returns the old one."""
        state = self.add_pool(pool)
        previous = state.table
        state.view.table = None
        state.table = None
        state.table_version = ""
        state.table_generation = generation
        state.outcomes = {}  # they named the old version and generation
        state.tokens = None
        state.table_applied_at = time.time()
        return previous

    def apply_load(self, snapshot: cluster_pb2.LoadSnapshot, now: float | None = None) -> bool:
        """Apply a load snapshot; False when it is not newer than the one applied (ignored).

        Order is ``(leader_term, seq)``, never wall time, so a skewed or forged ``observed_at``
        cannot freeze the view; ``observed_at`` is also capped at ``now``. A lower order is
        accepted once the applied snapshot is itself older than ``load_max_age_s`` (the store
        lost its data, or a forged term stopped everything else): the store is the truth.
        Nodes whose report was older than the bound when published count as unknown load.

        The snapshot's nodes are the pool's membership. Same ids and addresses: the loads and
        states go into the current view. Otherwise a new NodeSet and LoadView are built, the table
        is bound to them, and the view is swapped in with one assignment. A snapshot with
        duplicate node ids, a load that is negative or not finite, or a term or seq at or above
        :data:`MAX_LOAD_ORDER` (2^62, which no real leader reaches) raises ValueError unapplied.
        """
        now = time.time() if now is None else now
        if max(snapshot.leader_term, snapshot.seq) >= MAX_LOAD_ORDER:
            raise ValueError(
                f"term {snapshot.leader_term} / seq {snapshot.seq} is beyond any real one "
                "(corrupt or forged)"
            )
        state = self.add_pool(snapshot.pool or DEFAULT_POOL)
        order = (snapshot.leader_term, snapshot.seq)
        if order == state.load_order or (
            order < state.load_order and now - state.load_applied_at <= self.load_max_age_s
        ):
            return False
        read = read_snapshot(snapshot, state.view.nodes, self.load_max_age_s * 1000.0)
        view = state.view
        if read.nodes is not view.nodes:
            view = self._new_view(read.nodes)
            view.table = bind_with_memo(state.table, read.nodes)
        observed_at = min(snapshot.observed_at_unix_ms / 1000.0, now)
        view.apply_snapshot(observed_at, read.loads, healthy=read.healthy, draining=read.draining)
        if read.aged:
            view.forget_loads(read.aged)
        if view is not state.view:
            state.outcomes = {}
            state.tokens = None
            ids = set(view.nodes.ids)
            state.outliers.keep_only(ids)
            state.probes.keep_only(ids)
            apply_ejections(state.outliers, view)
        state.view = view
        state.load_order = order
        state.load_applied_at = now
        state.load_aged = False
        return True

    def age_loads(self, now: float) -> list[str]:
        """Forget the snapshot loads of pools whose snapshot is older than the bound (the control
        plane is away): their nodes fall back to this router's own in-flight counts. Returns
        the pools aged by this call."""
        aged = []
        for name, state in self.pools.items():
            if state.load_aged or state.load_applied_at == 0.0:
                continue
            if now - state.load_applied_at > self.load_max_age_s:
                state.view.forget_loads()
                state.load_aged = True
                aged.append(name)
        return aged
