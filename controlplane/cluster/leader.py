"""Lease-based leadership: one instance runs the cluster-wide loops, any instance serves the API.

Every ``ttl / 3`` an instance calls ``acquire_or_renew`` on the Redis lease ``controlplane``
(``SET NX PX ttl`` or ``PEXPIRE`` by the holder, one Lua script). The holder counts itself leader
until ``0.8 x ttl`` after the start of its last successful renewal, which is before Redis can
expire the lease, so two instances never both act as leader (assuming clocks that tick at similar
rates). When the leader stops renewing (crash, partition), another instance acquires the lease
within ``ttl + ttl / 3``; a graceful stop releases it at once. Each acquisition starts a new
*term*, and so does leadership regained after it lapsed locally (a renewal that hung past
the safety window): the leader's loops reload their state from Redis when the term changes.

Each call doubles as the instance's check that it can reach the store: ``on_reachable`` hears
every change (the gRPC ``readiness`` status follows it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from cacheroute_state.interfaces import LeaseStore, StoreUnavailableError
from controlplane.metrics import ControlPlaneMetrics

# The one Redis lease every control-plane instance of a deployment competes for.
LEADER_LEASE = "controlplane"
SAFETY = 0.8
log = structlog.get_logger("controlplane.cluster.leader")


class LeaderElector:
    def __init__(
        self,
        leases: LeaseStore,
        instance_id: str,
        *,
        ttl_s: float,
        metrics: ControlPlaneMetrics,
        name: str = LEADER_LEASE,
        on_reachable: Callable[[bool], Awaitable[None]] | None = None,
    ) -> None:
        self._leases = leases
        self.instance_id = instance_id
        self.ttl_s = ttl_s
        self._metrics = metrics
        self.name = name
        self.term = 0
        self._valid_until = 0.0
        self._on_reachable = on_reachable
        self.store_reachable: bool | None = None  # None: not asked yet

    @property
    def is_leader(self) -> bool:
        return time.monotonic() < self._valid_until

    async def tick(self) -> bool:
        """Try to acquire or renew once; returns whether this instance leads afterwards."""
        started = time.monotonic()
        was_leader = self.is_leader
        try:
            held = await self._leases.acquire_or_renew(
                self.name, self.instance_id, max(1, round(self.ttl_s * 1000))
            )
        except StoreUnavailableError as exc:
            log.warning("lease renewal failed", error=str(exc), leading=self.is_leader)
            held = False
            await self._reachable(False)
        else:
            await self._reachable(True)
        # Leadership that lapsed while the call was in flight (a slow or paused Redis) resumes as
        # a new term: another instance may have led in the gap, so the loops must reload.
        continuing = self.is_leader
        if held:
            self._valid_until = started + SAFETY * self.ttl_s
            if self.is_leader and not continuing:
                self.term += 1
                log.info("became leader", instance=self.instance_id, term=self.term)
        elif was_leader:  # someone else holds it, or Redis is away: stop acting as leader now
            self._valid_until = 0.0
            log.warning("lost leadership", instance=self.instance_id)
        self._metrics.leader.set(1 if self.is_leader else 0)
        return self.is_leader

    async def _reachable(self, reachable: bool) -> None:
        if reachable != self.store_reachable:
            self.store_reachable = reachable
            if self._on_reachable is not None:
                await self._on_reachable(reachable)

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.ttl_s / 3)

    async def release(self) -> None:
        """Give the lease up now (graceful stop) so another instance takes over at once."""
        leading = self.is_leader
        self._valid_until = 0.0
        self._metrics.leader.set(0)
        if leading:
            try:
                await self._leases.release(self.name, self.instance_id)
            except StoreUnavailableError as exc:
                log.warning("lease release failed", error=str(exc))
            else:
                log.info("released leadership", instance=self.instance_id)
