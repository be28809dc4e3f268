"""Time to first token per destination node, as this router measured it, for traffic reports.

An engine that exports no TTFT histogram (llama.cpp's ``llama-server``) leaves the control plane's
TTFT windows, and so the live guard and the fleet profile's windows, without samples. The HTTP
front measures every answer anyway (``cacheroute_router_ttft_seconds``); this keeps the same
measurement per (pool, node), and :class:`~dataplane.telemetry.traffic.TrafficReporter` takes
what was observed since the previous report into each pool's report (a histogram of that window:
the leader adds it as is, reading each report once; a dropped report loses its window, as it loses
its traffic counts). Bounded: at most :data:`MAX_NODES` nodes a pool.
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
    """TTFT counts per pool and node since the last take (module docstring); thread-safe."""

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

    def pending(self, pool: str) -> bool:
        """Whether answers were timed since the pool's last :meth:`take`."""
        with self._lock:
            return bool(self._pools.get(pool))

    def take(self, pool: str) -> list[cluster_pb2.NodeTtft]:
        """The pool's histograms since the last take, one per node that answered, by node."""
        with self._lock:
            nodes = self._pools.pop(pool, {})
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
