"""Active health probes in the router process: the loop, the TCP connects, metrics and log lines.

When to probe and what a result changes is :mod:`dataplane.core.active_probes`; this adapter
runs every ``--active-probe-interval`` (2 s; 0: off): for each pool whose last applied snapshot
is older than ``--active-probe-after-stale`` (10 s) it opens one TCP connection to every
destination's address within ``--active-probe-timeout`` (1 s), all at once, and closes it, and
hands the round's results to the core. A pool
whose snapshots are fresh again gets its probe ejections dropped. The snapshot age is the wall
clock (``time.time``), as the router's load view keeps it.

Log lines: ``load snapshots stale; probing destinations`` once per episode; ``destination ejected
by active probe`` and ``probed destination restored`` (with ``reason``) once per change. Metrics:
``cacheroute_router_active_probes_total{pool,result}`` (``ok``/``failed``),
``cacheroute_router_active_probe_ejections_total{pool,node}`` and
``cacheroute_router_active_probe_ejected{pool}`` (ejected by probes now).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from dataplane.core.active_probes import (
    ProbeChange,
    ProbeConfig,
    report_round,
    reset_probes,
    should_probe,
)
from dataplane.core.router import PoolState, Router
from servekit.addresses import parse_host_port

log = structlog.get_logger("dataplane.health.active_probe")


async def tcp_probe(address: str, timeout_s: float) -> bool | None:
    """Whether a TCP connection to ``address`` opens within ``timeout_s``; None when the address
    is not HOST:PORT (nothing to probe: such a destination is never judged)."""
    try:
        host, port = parse_host_port(address)
    except ValueError:
        return None
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class ActiveProber:
    """Probes the destinations of pools whose snapshots went stale (module docstring)."""

    def __init__(self, router: Router, config: ProbeConfig, registry: CollectorRegistry) -> None:
        self.router = router
        self.config = config
        self._probing: set[str] = set()  # pools in a stale episode (for the one log line)
        self.probes = Counter(
            "cacheroute_router_active_probes",
            "Active health probes (TCP connects) while a pool's snapshots are stale, by result.",
            ["pool", "result"],
            registry=registry,
        )
        self.ejections = Counter(
            "cacheroute_router_active_probe_ejections",
            "Destinations ejected by active probes (consecutive failed connects).",
            ["pool", "node"],
            registry=registry,
        )
        self.ejected = Gauge(
            "cacheroute_router_active_probe_ejected",
            "Destinations ejected by active probes now, per pool.",
            ["pool"],
            registry=registry,
        )

    async def tick(self) -> list[ProbeChange]:
        """One round over every pool; the ejections and restores it caused."""
        now = time.time()
        changes: list[ProbeChange] = []
        for name, state in list(self.router.pools.items()):
            applied = state.load_applied_at
            age = now - applied if applied > 0 else None
            if should_probe(self.config, age):
                changes += await self._probe_pool(name, state, age or 0.0)
            else:
                changes += self._fresh_again(name, state)
            self.ejected.labels(name).set(len(state.probes.ejected))
        return changes

    async def _probe_pool(self, name: str, state: PoolState, age_s: float) -> list[ProbeChange]:
        if name not in self._probing:
            self._probing.add(name)
            log.warning(
                "load snapshots stale; probing destinations",
                pool=name, snapshot_age_s=round(age_s, 1), destinations=len(state.view.nodes),
            )  # fmt: skip
        nodes = state.view.nodes
        targets = list(zip(nodes.ids, nodes.addresses, strict=True))
        timeout = self.config.timeout_s
        results = await asyncio.gather(*(tcp_probe(address, timeout) for _, address in targets))
        judged = {n: ok for (n, _), ok in zip(targets, results, strict=True) if ok is not None}
        for ok in judged.values():
            self.probes.labels(name, "ok" if ok else "failed").inc()
        # The view may have been replaced while probing: judge against the current one.
        changes = report_round(state.probes, state.outliers, state.view, judged)
        addresses = dict(targets)
        for change in changes:
            if change.ejected:
                self.ejections.labels(name, change.node_id).inc()
                log.warning(
                    "destination ejected by active probe",
                    pool=name, node=change.node_id, address=addresses[change.node_id],
                    consecutive_failures=change.failures, snapshot_age_s=round(age_s, 1),
                )  # fmt: skip
            else:
                log.info(
                    "probed destination restored",
                    pool=name, node=change.node_id, reason="probe succeeded",
                )  # fmt: skip
        return changes

    def _fresh_again(self, name: str, state: PoolState) -> list[ProbeChange]:
        self._probing.discard(name)
        restored = reset_probes(state.probes, state.outliers, state.view)
        for node_id in restored:
            log.info(
                "probed destination restored", pool=name, node=node_id, reason="fresh snapshot"
            )
        return [ProbeChange(node_id, False, 0) for node_id in restored]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval_s)
            await self.tick()
