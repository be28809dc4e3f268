"""Time to first token per destination node, as this router measured it, for traffic reports.

An engine that exports no TTFT histogram (llama.cpp's ``llama-server``) leaves the control plane's
TTFT windows, and so the live guard and the fleet profile's windows, without samples. The HTTP
front measures every answer anyway (``cacheroute_router_ttft_seconds``); this keeps the same
measurement per (pool, node) as cumulative counts, which :class:`~dataplane.telemetry.traffic.
TrafficReporter` attaches to each pool's report. Cumulative like a Prometheus histogram, so a
dropped report loses nothing and the leader takes deltas; it restarts at zero with the router,
which the leader reads as a counter reset. Bounded: at most :data:`MAX_NODES` nodes a pool.
"""

from __future__ import annotations

import bisect
import threading

from cacheroute.v1 import agent_pb2, cluster_pb2

MAX_NODES = 1024
# The bounds of cacheroute_router_ttft_seconds (dataplane/telemetry/served_metrics.py).
BOUNDS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
    7.5, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip


class NodeTtftCounts:
    """Cumulative TTFT counts per pool and node (module docstring); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # pool -> node -> [per-bucket counts (not cumulative) ..., +Inf count, sum]
        self._pools: dict[str, dict[str, list[float]]] = {}

    def observe(self, pool: str, node_id: str, seconds: float) -> None:
        if not node_id or seconds < 0:
            return
        with self._lock:
            nodes = self._pools.setdefault(pool, {})
            counts = nodes.get(node_id)
            if counts is None:
                if len(nodes) >= MAX_NODES:
                    return
                counts = nodes[node_id] = [0.0] * (len(BOUNDS) + 2)
            counts[bisect.bisect_left(BOUNDS, seconds)] += 1
            counts[-1] += seconds

    def readings(self, pool: str) -> list[cluster_pb2.NodeTtft]:
        """The pool's cumulative histograms, one per node that answered, sorted by node."""
        with self._lock:
            nodes = {n: list(c) for n, c in self._pools.get(pool, {}).items()}
        found = []
        for node_id in sorted(nodes):
            counts = nodes[node_id]
            cumulative, running = [], 0.0
            for c in counts[: len(BOUNDS)]:
                running += c
                cumulative.append(running)
            histogram = agent_pb2.LatencyHistogram(
                upper_bounds=BOUNDS,
                counts=cumulative,
                count=running + counts[len(BOUNDS)],
                sum=counts[-1],
            )
            found.append(cluster_pb2.NodeTtft(node_id=node_id, ttft=histogram))
        return found
