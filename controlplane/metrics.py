"""Prometheus metrics of one control-plane instance (its own registry, so tests can run several).

Gauges about the cluster (nodes by state, node load, report staleness, estimator keys) are set by
the leader's loops; on a follower they keep the last values it published while it led, and the
``leader`` gauge says which instance's values are current.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

NODE_STATES = ("healthy", "unhealthy", "draining", "down")


class ControlPlaneMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.planner_runs = Counter(
            "cacheroute_controlplane_planner_runs",
            "Plan builds, by pool, trigger (rpc/interval) and outcome (ok/skipped/error).",
            ["pool", "trigger", "outcome"],
            registry=r,
        )
        self.planner_seconds = Histogram(
            "cacheroute_controlplane_planner_duration_seconds",
            "Wall time of a plan build (rates, planner and store).",
            ["pool"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.nodes = Gauge(
            "cacheroute_controlplane_nodes",
            "Registered nodes by pool and state (healthy/unhealthy/draining/down).",
            ["pool", "state"],
            registry=r,
        )
        self.node_load = Gauge(
            "cacheroute_controlplane_node_load",
            "Running + waiting requests of a node in the last published snapshot.",
            ["pool", "node"],
            registry=r,
        )
        self.node_report_age = Gauge(
            "cacheroute_controlplane_node_report_age_seconds",
            "Age of a node's latest agent report when the snapshot was published.",
            ["pool", "node"],
            registry=r,
        )
        # KV-event residency (issue 31): set with the snapshot, only for nodes that report it.
        self.node_resident_blocks = Gauge(
            "cacheroute_controlplane_node_resident_blocks",
            "KV blocks resident on a node, by its engine's KV events.",
            ["pool", "node"],
            registry=r,
        )
        self.node_eviction_pressure = Gauge(
            "cacheroute_controlplane_node_eviction_pressure",
            "Fraction of a node's KV capacity evicted per second, by its engine's KV events.",
            ["pool", "node"],
            registry=r,
        )
        self.node_keys_not_resident = Gauge(
            "cacheroute_controlplane_node_planned_keys_not_resident",
            "The active plan's keys on a node whose shared prefix its engine does not hold.",
            ["pool", "node"],
            registry=r,
        )
        self.keys_demoted = Counter(
            "cacheroute_controlplane_planned_keys_demoted",
            "Planned keys demoted to the tail at a build because their prefix collapsed on a node.",
            ["pool"],
            registry=r,
        )
        self.snapshots = Counter(
            "cacheroute_controlplane_load_snapshots_published",
            "Load snapshots published, by pool.",
            ["pool"],
            registry=r,
        )
        self.agent_streams = Gauge(
            "cacheroute_controlplane_agent_streams",
            "Agent streams open on this instance.",
            registry=r,
        )
        self.agent_reports = Counter(
            "cacheroute_controlplane_agent_reports",
            "Node reports received on this instance.",
            registry=r,
        )
        self.auth_refusals = Counter(
            "cacheroute_controlplane_auth_refusals",
            "RPCs refused by --auth-file (code: UNAUTHENTICATED or PERMISSION_DENIED).",
            ["method", "code"],
            registry=r,
        )
        self.agent_reports_rejected = Counter(
            "cacheroute_controlplane_agent_reports_rejected",
            "Node reports refused with INVALID_ARGUMENT (reason: load, interval, address, "
            "identity, weight).",
            ["reason"],
            registry=r,
        )
        self.reports_expired = Counter(
            "cacheroute_controlplane_reports_expired",
            "Stored agent reports the leader forgot after --report-retention (agent gone without "
            "leaving), by pool.",
            ["pool"],
            registry=r,
        )
        self.rate_keys = Gauge(
            "cacheroute_controlplane_rate_estimator_keys",
            "Keys tracked by the rate estimator, by pool.",
            ["pool"],
            registry=r,
        )
        self.rate_total = Gauge(
            "cacheroute_controlplane_rate_estimator_total_rate",
            "Estimated total request rate (requests/s), by pool.",
            ["pool"],
            registry=r,
        )
        self.traffic_reports = Counter(
            "cacheroute_controlplane_traffic_reports",
            "Router traffic reports folded into the rate estimate, by pool.",
            ["pool"],
            registry=r,
        )
        self.leader = Gauge(
            "cacheroute_controlplane_leader",
            "1 while this instance holds the leader lease.",
            registry=r,
        )
        self.loop_errors = Counter(
            "cacheroute_controlplane_loop_errors",
            "Failed iterations of a background loop (Redis away, ...), by loop.",
            ["loop"],
            registry=r,
        )
        self.rpcs = Counter(
            "cacheroute_controlplane_rpcs",
            "Admin and agent RPCs handled, by method and status code.",
            ["method", "code"],
            registry=r,
        )
        self.pool_ttft_p99 = Gauge(
            "cacheroute_controlplane_pool_ttft_p99_seconds",
            "Pool p99 TTFT over the live guard's window, from the agents' TTFT histograms "
            "(leader only; unset until a window holds an observation).",
            ["pool"],
            registry=r,
        )
        self.pool_ttft_samples = Gauge(
            "cacheroute_controlplane_pool_ttft_samples",
            "TTFT observations in the pool's guard window over its nodes (leader only).",
            ["pool"],
            registry=r,
        )
        self.guard_decisions = Counter(
            "cacheroute_controlplane_guard_decisions",
            "Live-guard decisions after watched rollouts, by pool and phase "
            "(PHASE_PASSED, PHASE_FIRED, PHASE_INCONCLUSIVE).",
            ["pool", "phase"],
            registry=r,
        )
        self.auto_rounds = Counter(
            "cacheroute_controlplane_auto_rounds",
            "Automatic-mode rounds by pool and outcome (rolled_out, shadow_failed, unchanged, "
            "refused, skipped, waiting, error).",
            ["pool", "outcome"],
            registry=r,
        )
