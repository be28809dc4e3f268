"""The routers' TTFT measurement into the leader's TTFT windows, for engines that export none.

llama.cpp's ``llama-server`` has no TTFT histogram, so a pool of them gave the live guard and
the fleet windows no samples at all. Each router's traffic report carries the TTFT it measured
per destination node, cumulative since it started (``TrafficReport.node_ttft``); the rate tracker
reads every report anyway and hands them here. Per router only its newest report of a batch
counts (the counts are cumulative), stamped with the leader's clock when it was read, under the
source ``router:<router id>``: :class:`~controlplane.core.ttft_window.TtftWindows` uses it only
for nodes without engine readings and says so in ``status``.
"""

from __future__ import annotations

from collections.abc import Sequence

from cacheroute.v1 import cluster_pb2
from controlplane.core.ttft_window import Buckets, TtftWindows


def feed_router_ttft(
    windows: TtftWindows, pool: str, reports: Sequence[cluster_pb2.TrafficReport], now_ms: int
) -> int:
    """Feed the newest report of each router; returns the node readings that were new."""
    newest: dict[str, cluster_pb2.TrafficReport] = {}
    for report in reports:
        held = newest.get(report.router_id)
        if held is None or report.window_end_unix_ms >= held.window_end_unix_ms:
            newest[report.router_id] = report
    fed = 0
    for router_id, report in newest.items():
        for entry in report.node_ttft:
            h = entry.ttft
            if not entry.node_id or len(h.upper_bounds) != len(h.counts):
                continue
            reading = Buckets(tuple(h.upper_bounds), tuple(h.counts), h.count)
            fed += windows.observe(pool, entry.node_id, now_ms, reading, f"router:{router_id}")
    return fed
