"""The routers' TTFT measurement into the leader's TTFT windows, for engines that export none.

llama.cpp's ``llama-server`` has no TTFT histogram, so a pool of them gave the live guard and
the fleet windows no samples at all. Each router's traffic report carries the TTFT it measured
per destination node over that report's window (``TrafficReport.node_ttft``: observations, not a
cumulative reading); the leader's rate tracker reads every report exactly once from its cursor
anyway and hands the new ones here. They are added to the windows, stamped with the leader's
clock when read, under the source ``router:<router id>``:
:class:`~controlplane.core.ttft_window.TtftWindows` uses them only for nodes without engine
readings, and ``status`` says so. A report that never reached the store loses its window's
samples with its traffic counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from cacheroute.v1 import cluster_pb2
from controlplane.core.ttft_window import Buckets, TtftWindows


def feed_router_ttft(
    windows: TtftWindows, pool: str, reports: Sequence[cluster_pb2.TrafficReport], now_ms: int
) -> float:
    """Add the reports' per-node observations; returns how many there were."""
    added = 0.0
    for report in reports:
        source = f"router:{report.router_id}"
        for entry in report.node_ttft:
            h = entry.ttft
            if not entry.node_id or len(h.upper_bounds) != len(h.counts) or h.count <= 0:
                continue
            step = Buckets(tuple(h.upper_bounds), tuple(h.counts), h.count)
            windows.add(pool, entry.node_id, now_ms, step, source)
            added += h.count
    return added
