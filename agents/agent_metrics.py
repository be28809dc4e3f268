"""The agent process's own Prometheus metrics (one registry, a ``node_id`` label per agent).

- ``cacheroute_agent_scrapes_total{node_id,result}``: scrapes by result (``ok``, ``http_error``,
  ``timeout``, ``unreachable``, ``malformed``, ``unrecognised``).
- ``cacheroute_agent_scrape_duration_seconds{node_id}``: GET + parse time of each scrape.
- ``cacheroute_agent_counter_resets_total{node_id}``: intervals skipped for an engine restart.
- ``cacheroute_agent_reports_sent_total{node_id}``: NodeReports written to the stream.
- ``cacheroute_agent_reconnects_total{node_id}``: streams lost or refused (each schedules a
  reconnect).
- ``cacheroute_agent_connected{node_id}``: 1 while a stream to the control plane is open.
- ``cacheroute_agent_engine_healthy{node_id}``: 1 when the last scrape succeeded.
- ``cacheroute_agent_staleness_seconds{node_id}``: age of the newest good scrape when the last
  report was built (+Inf before the first good scrape).
- ``cacheroute_agent_report_interval_seconds{node_id}``: the interval in force.
- With a KV-event subscriber (:mod:`agents.kv_subscriber`), as of the last report:
  ``cacheroute_agent_kv_resident_blocks{node_id}``, ``cacheroute_agent_kv_event_batches{node_id}``
  (applied), ``cacheroute_agent_kv_event_gaps_unrecovered{node_id}`` and
  ``cacheroute_agent_kv_event_frames_dropped{node_id}`` (garbage or oversize); counters since
  the agent started, exported as gauges because they are copied, not counted, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

SCRAPE_RESULTS = ("ok", "http_error", "timeout", "unreachable", "malformed", "unrecognised")
SCRAPE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class AgentMetrics:
    """The metric families of one agent process; :meth:`for_node` binds one agent's children."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        node = ["node_id"]
        r = self.registry
        self.scrapes = Counter(
            "cacheroute_agent_scrapes", "Engine scrapes by result.", [*node, "result"], registry=r
        )
        self.scrape_seconds = Histogram(
            "cacheroute_agent_scrape_duration_seconds",
            "Time to fetch and parse the engine's /metrics.",
            node,
            buckets=SCRAPE_BUCKETS,
            registry=r,
        )
        self.resets = Counter(
            "cacheroute_agent_counter_resets",
            "Intervals skipped because the engine's counters restarted.",
            node,
            registry=r,
        )
        self.reports = Counter(
            "cacheroute_agent_reports_sent", "NodeReports written to the stream.", node, registry=r
        )
        self.reconnects = Counter(
            "cacheroute_agent_reconnects",
            "Control-plane streams lost or refused (each schedules a reconnect).",
            node,
            registry=r,
        )
        self.connected = Gauge(
            "cacheroute_agent_connected",
            "1 while the control-plane stream is open.",
            node,
            registry=r,
        )
        self.healthy = Gauge(
            "cacheroute_agent_engine_healthy",
            "1 when the last scrape succeeded.",
            node,
            registry=r,
        )
        self.staleness = Gauge(
            "cacheroute_agent_staleness_seconds",
            "Age of the newest good scrape when the last report was built.",
            node,
            registry=r,
        )
        self.interval = Gauge(
            "cacheroute_agent_report_interval_seconds",
            "The scrape/report interval in force.",
            node,
            registry=r,
        )

        self.kv = {
            name: Gauge(f"cacheroute_agent_kv_{name}", text, node, registry=r)
            for name, text in (
                ("resident_blocks", "Blocks the engine's KV events say are resident."),
                ("event_batches", "KV event batches applied since the agent started."),
                ("event_gaps_unrecovered", "KV event gaps the replay socket could not fill."),
                ("event_frames_dropped", "KV event frames dropped as garbage or oversize."),
            )
        }

    def for_node(self, node_id: str) -> NodeMetrics:
        for result in SCRAPE_RESULTS:
            self.scrapes.labels(node_id, result)
        return NodeMetrics(
            node_id=node_id,
            families=self,
            scrape_seconds=self.scrape_seconds.labels(node_id),
            resets=self.resets.labels(node_id),
            reports=self.reports.labels(node_id),
            reconnects=self.reconnects.labels(node_id),
            connected=self.connected.labels(node_id),
            healthy=self.healthy.labels(node_id),
            staleness=self.staleness.labels(node_id),
            interval=self.interval.labels(node_id),
        )


@dataclass(frozen=True)
class NodeMetrics:
    node_id: str
    families: AgentMetrics
    scrape_seconds: Histogram
    resets: Counter
    reports: Counter
    reconnects: Counter
    connected: Gauge
    healthy: Gauge
    staleness: Gauge
    interval: Gauge

    def kv_events(self, resident: int, batches: int, unrecovered: int, dropped: int) -> None:
        kv = self.families.kv
        for name, value in (
            ("resident_blocks", resident),
            ("event_batches", batches),
            ("event_gaps_unrecovered", unrecovered),
            ("event_frames_dropped", dropped),
        ):
            kv[name].labels(self.node_id).set(value)

    def scraped(self, result: str, seconds: float) -> None:
        self.families.scrapes.labels(self.node_id, result).inc()
        self.scrape_seconds.observe(seconds)
