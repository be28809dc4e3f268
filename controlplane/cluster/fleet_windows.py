"""The leader's Flat-LB window recorder: the observations a fleet profile is fitted to.

The Flat-only rule (docs/results.md §2; :mod:`sim.fleet_fit`): a profile of the pool's engines is
fitted on windows routed by Flat-LB only, because Flat-LB is cache-blind, so its latencies say how
fast the hardware is without favouring any policy the gate will compare. So a window counts only
while the pool has *no active plan* (no pointer, or a disabled one) for all of it, under one
pointer generation: a plan that was rolled out and disabled between two ticks restarts the window.

Every :data:`WINDOW_MS` of Flat-LB routing the leader merges the agents' TTFT histogram deltas
over the pool's nodes (:class:`controlplane.core.ttft_window.TtftWindows`, the same windows the
live guard reads) into the pool's p50 and p99, and the rate served as the histograms' count over
the window's length (first tokens per second: what the engines served, whatever the routers
sampled). A window with fewer than :data:`MIN_SAMPLES` observations is dropped (its quantiles are
noise). The store keeps the newest :data:`KEEP` per pool (``cr:{pool}:fleet_windows``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.core.ttft_window import TtftWindows

WINDOW_MS = 60_000
KEEP = 30  # half an hour of Flat-LB windows
MIN_SAMPLES = 100
TICK_S = 5.0


@dataclass
class _Open:
    start_ms: int
    generation: int


class FleetWindowRecorder:
    """Closes one Flat-LB window per pool every ``window_ms`` (module docstring)."""

    def __init__(
        self,
        stores: Stores,
        ttft: TtftWindows,
        *,
        window_ms: int = WINDOW_MS,
        keep: int = KEEP,
        min_samples: int = MIN_SAMPLES,
    ) -> None:
        if window_ms > ttft.retention_ms:
            raise ValueError("the window is longer than the TTFT windows' retention")
        self._stores = stores
        self._ttft = ttft
        self.window_ms = window_ms
        self.keep = keep
        self.min_samples = min_samples
        self._open: dict[str, _Open] = {}

    async def tick_all(self, now_ms: int) -> list[cluster_pb2.FleetWindow]:
        recorded = []
        for pool in await self._stores.plans.pools():
            window = await self.tick(pool, now_ms)
            if window is not None:
                recorded.append(window)
        return recorded

    async def tick(self, pool: str, now_ms: int) -> cluster_pb2.FleetWindow | None:
        """The window closed and stored at ``now_ms``, if one was."""
        active = await self._stores.plans.get_active(pool)
        generation = active.generation if active is not None else 0
        if active is not None and active.version:
            self._open.pop(pool, None)  # planned routing: not a Flat-LB observation
            return None
        held = self._open.get(pool)
        if held is None or held.generation != generation:
            self._open[pool] = _Open(now_ms, generation)
            return None
        if now_ms - held.start_ms < self.window_ms:
            return None
        self._open[pool] = _Open(now_ms, generation)
        p50 = self._ttft.quantile(pool, 0.50, held.start_ms, now_ms)
        p99 = self._ttft.quantile(pool, 0.99, held.start_ms, now_ms)
        if p50.value_s is None or p99.value_s is None or p50.samples < self.min_samples:
            return None
        window = cluster_pb2.FleetWindow(
            pool=pool,
            start_unix_ms=held.start_ms,
            end_unix_ms=now_ms,
            qps=p50.samples * 1000.0 / (now_ms - held.start_ms),
            ttft_p50_s=p50.value_s,
            ttft_p99_s=p99.value_s,
            samples=p50.samples,
            nodes=p50.nodes,
        )
        await self._stores.telemetry.add_fleet_window(window, self.keep)
        return window
