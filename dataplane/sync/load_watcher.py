"""Applies the control plane's load snapshots: pushed by hints, re-read on resync and a timer.

A "load" hint carries the serialized ``LoadSnapshot``, but anyone who can publish on the channel
could forge one (a forged future snapshot steered every decision to one engine for ~3 s), so a hint
is only a wake-up: the watcher reads the stored record (one GET) and applies *that*; a hint that
differs from it is counted as rejected and logged once per pool. Hints can be missed (Redis away, a
reconnect), so every ``interval_s`` and on every resync the watcher also reads
``store.cluster.get_load(pool)`` for each pool. Either way the router keeps only snapshots newer
than the one applied (ordered by ``(leader_term, seq)``, never wall time), so a late or repeated
snapshot never undoes newer information. Each tick also ages the view: a pool whose snapshot is
older than the router's ``load_max_age_s`` (the control plane is away) compares only the router's
own in-flight counts (logged once per pool and episode).

"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog
from google.protobuf.message import DecodeError

from cacheroute.v1 import cluster_pb2
from cacheroute_state.interfaces import ClusterStore, StoreUnavailableError
from dataplane.core.router import Router
from dataplane.telemetry.affinity import DeliveredAffinity
from dataplane.telemetry.router_metrics import RouterMetrics
from servekit.waiting import wait_event

log = structlog.get_logger("dataplane.sync.load_watcher")


class LoadWatcher:
    """The load loop of one router (module docstring)."""

    def __init__(
        self,
        router: Router,
        cluster: ClusterStore,
        metrics: RouterMetrics,
        *,
        interval_s: float = 1.0,
        affinity: DeliveredAffinity | None = None,
    ) -> None:
        self._router = router
        self._affinity = affinity
        self._cluster = cluster
        self._metrics = metrics
        self.interval_s = interval_s
        self._wake = asyncio.Event()
        self._forged: set[str] = set()  # pools whose forged hint was logged
        self.synced = False

    async def apply_payload(self, pool: str, payload: bytes) -> None:
        """Apply the stored snapshot a "load" hint announced (module docstring)."""
        try:
            stored = await self._cluster.get_load(pool)
        except (StoreUnavailableError, DecodeError):
            return  # the timer's sync says why and retries
        if stored is None:
            return
        try:
            matches = cluster_pb2.LoadSnapshot.FromString(payload) == stored
        except DecodeError:
            matches = False
        if not matches:
            self._metrics.load_update(pool, "rejected")
            if pool not in self._forged:
                self._forged.add(pool)
                log.warning("load hint differs from the stored snapshot; applying the stored one",
                            pool=pool, size=len(payload))  # fmt: skip
        stored.pool = stored.pool or pool
        if stored.pool == pool:
            self.apply(stored)

    def apply(self, snapshot: cluster_pb2.LoadSnapshot) -> None:
        pool = snapshot.pool
        state = self._router.pools.get(pool)
        before = state.load_order if state is not None else (-1, -1)
        was_aged = state is not None and state.load_aged
        try:
            applied = self._router.apply_load(snapshot)
        except ValueError as exc:  # duplicate node ids, a NaN/negative load, a malformed pool
            self._metrics.load_update(pool, "rejected")
            log.warning("load snapshot rejected", pool=pool, error=str(exc))
            return
        self._metrics.load_update(pool, "applied" if applied else "stale")
        if applied and self._affinity is not None:
            eligible = [n for n in snapshot.nodes if n.healthy and not n.draining]
            self._affinity.loads(pool, [n.load / (n.weight or 1.0) for n in eligible])
        if applied and (snapshot.leader_term, snapshot.seq) < before:
            log.warning(
                "load snapshot order went backwards; following the store",
                pool=pool, held=list(before), term=snapshot.leader_term, seq=snapshot.seq,
            )  # fmt: skip
        if applied and was_aged:
            log.info("load snapshots are back", pool=pool)

    def request(self) -> None:
        """Re-read every pool's snapshot soon (on a resync)."""
        self._wake.set()

    async def sync(self) -> None:
        """Read and apply the stored snapshot of every known pool."""
        for pool in sorted(self._router.pools):
            try:
                snapshot = await self._cluster.get_load(pool)
            except DecodeError as exc:  # a corrupt record: keep what is held, say so
                self._metrics.load_update(pool, "rejected")
                log.warning("stored load snapshot is corrupt", pool=pool, error=str(exc)[:80])
                continue
            if snapshot is not None:
                snapshot.pool = snapshot.pool or pool
                if snapshot.pool == pool:
                    self.apply(snapshot)
        self.synced = True  # every known pool's snapshot read at least once

    async def run(self) -> None:
        while True:
            await wait_event(self._wake, self.interval_s)
            self._wake.clear()
            with contextlib.suppress(StoreUnavailableError):
                await self.sync()
            for pool in self._router.age_loads(time.time()):
                log.warning(
                    "load snapshot too old; using in-flight counts only",
                    pool=pool, max_age_s=self._router.load_max_age_s,
                )  # fmt: skip
