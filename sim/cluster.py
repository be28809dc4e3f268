"""The cluster event loop: arrivals, routers with their own load views, node steps, snapshots.

Routing works as in production. Each simulated router owns a :class:`LoadView` and its own
policy instance; a front tier deals requests to routers (``front``: round-robin, by key hash, or
by conversation). Every ``snapshot_interval_s`` the
nodes' running + waiting counts are applied to every router's view, observed at the snapshot
time, and each router's decisions count as in-flight correction through ``Policy.route`` until a
later snapshot covers them.

Session tokens (``echo_tokens``): a multi-turn client sends back the token of its conversation's
previous decision, which names that decision's node. A run's table never changes, so every
echoed token is valid and is passed to the policy as ``Request.session`` (the router's token
check, :mod:`dataplane.core.session_token`, is tested on its own). ``Request.flow`` is the
conversation id (the request index for single-turn requests).

Tree sync (``tree_sync_s``, prefix-history policies with several routers): each router's inserts
reach every other router's prefix index at the next sync tick, as the SGLang model gateway's mesh
broadcasts its tenant deltas once per gossip round (:mod:`sim.tree_sync`).

The loop's events are arrivals, from the sorted request list, and snapshots, from a fixed grid.
Nodes do not touch one another, so a node's steps run when something reads it
(:meth:`sim.node.Node.advance`): a request routed to it, a snapshot of every node's load, a
KV-event policy reading its cache. The results are those of running every step in time order
(a tie goes to the arrival or snapshot, then to the step's end). A node that receives a request
while idle starts a step at once; a busy node picks it up when its current step ends.

The run stops when every measured request has its first token or has waited ``timeout_s`` (or,
with ``drain_all``, when every request has finished). With ``abort_above_s`` set (the capacity
search), it also stops as soon as more than 1% of the measured requests are known to wait longer
than that, which already decides p99 > ``abort_above_s``; the p99 it then reports is a lower
bound, marked censored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dataplane.core.load_view import LoadView, NodeSet, bind_with_memo
from dataplane.core.policies import Request, make_policy
from dataplane.core.policies.ring import splitmix64
from dataplane.core.table import RoutingTable
from sim.cache_impl import new_prefix_cache
from sim.cluster_types import (
    DEFAULT_SNAPSHOT_S,
    DEFAULT_TIMEOUT_S,
    FRONTS,
    ClusterConfig,
    SimRouter,
)
from sim.gc_pause import gc_paused
from sim.node import Job, Node
from sim.run_results import RunMetrics, summarize
from sim.steady import warm_cluster
from sim.tree_sync import TreeSync
from sim.types import SimRequest

__all__ = [
    "DEFAULT_SNAPSHOT_S",
    "DEFAULT_TIMEOUT_S",
    "FRONTS",
    "Cluster",
    "ClusterConfig",
    "SimRouter",
    "simulate",
]

_FLOW_SINGLE = 1 << 48  # flow ids of single-turn requests: past every conversation id


class EngineResidency:
    """The engines' resident prefixes, read as a KV-event consumer would know them (no delay).

    ``now`` is the routing decision's time: a node's steps up to it run before its cache is read.
    """

    __slots__ = ("nodes", "now")

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = nodes
        self.now = float("-inf")

    def resident_prefix(self, node: int, blocks: Sequence[int]) -> int:
        engine = self.nodes[node]
        engine.advance(self.now)
        return engine.cache.match(blocks)[0]


class _Watch:
    """Measured requests in arrival order, popped once resolved or older than ``limit_s``."""

    __slots__ = ("late", "limit", "queue")

    def __init__(self, limit_s: float) -> None:
        self.limit = limit_s
        self.queue: deque[Job] = deque()
        self.late = 0  # requests known to have waited (or be waiting) longer than the limit

    def advance(self, now: float) -> None:
        queue = self.queue
        limit = self.limit
        while queue:
            job = queue[0]
            if job.first_token >= 0.0:
                if job.first_token - job.arrival > limit:
                    self.late += 1
            elif job.rejected or now - job.arrival > limit:
                self.late += 1
            else:
                return
            queue.popleft()


class Cluster:
    """One simulation run; build, then :meth:`run` once."""

    def __init__(
        self,
        requests: Sequence[SimRequest],
        policy: str,
        config: ClusterConfig,
        table: RoutingTable | None = None,
        prewarm: Sequence[SimRequest] = (),
    ) -> None:
        self.requests = requests
        self.prewarm = prewarm  # replayed into caches and policies first (sim.steady), times < 0
        self.config = config
        node_set = NodeSet(config.node_ids())
        self.measure_end = requests[-1].arrival_s if requests else 0.0
        window = (config.warmup_s, self.measure_end)
        self.nodes = [
            Node(
                i,
                config.profile,
                cache=new_prefix_cache(config.profile.kv_blocks),
                window=window,
                cache_outputs=config.cache_outputs,
            )
            for i in range(config.nodes)
        ]
        self.routers: list[SimRouter] = []
        self._residency: EngineResidency | None = None
        for r in range(max(1, config.routers)):
            view = LoadView(node_set)
            view.table = bind_with_memo(table, node_set)  # as the live router binds it
            instance = make_policy(policy, seed=config.seed * 1009 + r, **config.policy_params)
            if instance.needs_residency:  # KV events, delivered at once: the engines' caches
                if self._residency is None:
                    self._residency = EngineResidency(self.nodes)
                instance.residency = self._residency
            self.routers.append(SimRouter(instance, view))
        if config.front not in FRONTS:
            raise ValueError(f"front must be one of {', '.join(FRONTS)}, got {config.front!r}")
        first = self.routers[0].policy
        self._sessions = first.needs_session
        self._echo = config.echo_tokens and first.needs_session
        self._last_node: dict[int, int] = {}  # conversation → node of its last decision
        self.sync = TreeSync.for_routers(self.routers, config.tree_sync_s)
        self.jobs: list[Job] = []
        self.routed = [0] * config.nodes  # measured requests per node
        self.snapshots = 0
        self.aborted = False
        self.end_s = 0.0
        self._drain = _Watch(config.timeout_s)
        self._abort: _Watch | None = None
        self._abort_at = 1

    def run(self) -> RunMetrics:
        with gc_paused():  # a run allocates per request and builds no cycles (sim/gc_pause.py)
            return self._run()

    def _run(self) -> RunMetrics:
        config = self.config
        requests = self.requests
        warm_cluster(self, self.prewarm)
        measured = sum(1 for r in requests if r.arrival_s >= config.warmup_s)
        self._drain = _Watch(config.timeout_s)
        if config.abort_above_s is not None:
            self._abort = _Watch(config.abort_above_s)
            # p99 (linear interpolation) exceeds the limit once this many requests exceed it.
            self._abort_at = measured - int(0.99 * (measured - 1)) if measured else 1
        nodes = self.nodes
        interval = config.snapshot_interval_s
        inf = float("inf")
        total = len(requests)
        i = 0
        next_snap = 0.0
        now = 0.0
        while True:
            t_arrival = requests[i].arrival_s if i < total else inf
            if next_snap <= t_arrival:
                now = next_snap
                next_snap += interval
                for node in nodes:
                    node.advance(now)
                if self._tick(now) or (i >= total and self._drained()):
                    break
            else:
                now = t_arrival
                self._arrive(i, now)
                i += 1
        self.end_s = now
        return summarize(self, measured)

    def _arrive(self, i: int, now: float) -> None:
        """Route request ``i`` through its router and hand it to the chosen node."""
        request = self.requests[i]
        job = Job(i, request)
        self.jobs.append(job)
        index = self.route(i, request, now)
        if now >= self.config.warmup_s:
            self.routed[index] += 1
            self._drain.queue.append(job)
            if self._abort is not None:
                self._abort.queue.append(job)
        node = self.nodes[index]
        node.advance(now)
        node.enqueue(job)
        if not node.busy:
            dt = node.start_step(now)
            if dt > 0.0:
                node.step_end = now + dt

    def front(self, i: int, request: SimRequest) -> int:
        """The router request ``i`` reaches: round-robin, by key hash, or by conversation (a
        single-turn request, which has none, goes round-robin)."""
        count = len(self.routers)
        if count == 1:
            return 0
        front = self.config.front
        if front == "key":
            return splitmix64(request.key_hash) % count
        if front == "session" and request.thread >= 0:
            return splitmix64(request.thread) % count
        return i % count

    def route(self, i: int, request: SimRequest, now: float) -> int:
        """Deal request ``i`` to a router (the front tier) and return the node it chose."""
        r = self.front(i, request)
        router = self.routers[r]
        thread = request.thread
        if self._residency is not None:
            self._residency.now = now
        if self._sessions:
            session = self._last_node.get(thread, -1) if self._echo and thread >= 0 else -1
            flow = thread if thread >= 0 else _FLOW_SINGLE + i
            routed = Request(request.key_hash, request.blocks, session, flow, request.turn == 0)
        else:
            routed = Request(request.key_hash, request.blocks)
        node = router.policy.route(routed, router.view, now).node
        if self._echo and thread >= 0:
            self._last_node[thread] = node
        if self.sync is not None:
            self.sync.record(r, node, routed, now)
        return node

    def _drained(self) -> bool:
        if self.config.drain_all:
            return not any(node.busy for node in self.nodes)
        return not self._drain.queue

    def _tick(self, now: float) -> bool:
        """Snapshot to every router and advance the watches; True when the run must abort."""
        self._snapshot(now)
        if self.sync is not None:
            self.sync.tick(now)
        self._drain.advance(now)
        abort = self._abort
        if abort is not None:
            abort.advance(now)
            if abort.late >= self._abort_at:
                self.aborted = True
                return True
        return False

    def _snapshot(self, now: float) -> None:
        loads = [node.load for node in self.nodes]
        for router in self.routers:
            router.view.apply_snapshot(now, loads)
        self.snapshots += 1


def simulate(
    requests: Sequence[SimRequest],
    policy: str,
    config: ClusterConfig,
    table: RoutingTable | None = None,
    prewarm: Sequence[SimRequest] = (),
) -> RunMetrics:
    """Run ``policy`` over ``requests`` (sorted by arrival, times from 0) on a fresh cluster.

    ``prewarm`` (times < 0, sorted) is replayed into the caches and the policies first.
    """
    return Cluster(requests, policy, config, table, prewarm).run()
