"""Keeps each pool's table at the active pointer, level-triggered, and says so (ACK/NACK).

The loop, as an xDS client does it:

1. Wake on a "table" hint for a pool, on a "resync" (all pools), or every ``interval_s``
   (all pools; this tick also re-reads the store's pool set).
2. Per pool, read the active pointer. Nothing to do when it names what the pool serves, or the
   generation this router already rejected.
3. Otherwise, when the control plane stored a delta from the version this pool serves, read
   and apply that (:mod:`dataplane.sync.table_deltas`; a delta that does not give the exact
   table falls through to the whole table). Else fetch the table bytes (in slices,
   :mod:`cacheroute_state.redis_table_fetch`), then
   decode, validate and verify the content hash on a dedicated worker thread at a lower OS
   priority (:mod:`dataplane.sync.table_decode`)
   (`table_codec.decode_table` keeps the GIL free for the big arrays), check the pool and the
   version against the pointer, bind the table to the pool's membership and swap one reference
   (:meth:`dataplane.core.router.Router.install_table`); the replaced table is freed on that thread.
4. Write a ``RouterAck``: accepted, or a NACK with the ``TableError`` text while the last good
   table keeps serving. A rejected (generation, version) is remembered, so it is not fetched again
   every tick; the next pointer move is tried afresh. A pointer with an empty version (``cachectl
   plan disable``) removes the pool's table: the policy falls back to Flat-LB (``no_table``).

Every ``ack_interval_s`` the last ACK/NACK of each pool is written again with a fresh timestamp
(a heartbeat: ``cachectl status`` tells live routers from gone ones); a failed write is retried
then. A pointer whose generation went *down* (Redis lost its data and a plan was rolled out
again) is applied too: the store is the truth, and a router stuck on a generation the store no
longer has could never converge.

A corrupt pointer record (bytes that do not decode as an ``ActivePointer``) is a NACK with the
reason (version "" and generation 0: there is no pointer to name), logged once per episode; the
pool keeps serving what it holds (a new router: power-of-two choices, Flat-LB, with no table), and
the other pools are synced as usual.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog
from google.protobuf.message import DecodeError

from cacheroute.v1 import cluster_pb2
from cacheroute_state.interfaces import ClusterStore, PlanStore, StoreUnavailableError
from dataplane.core.names import POOL_PATTERN
from dataplane.core.protobuf_fields import Buffer
from dataplane.core.router import Router
from dataplane.core.table import RoutingTable, TableError
from dataplane.sync.table_decode import DecodeThread, decode_for, decode_owned
from dataplane.sync.table_deltas import from_delta
from dataplane.telemetry.router_metrics import RouterMetrics
from servekit.waiting import wait_event

__all__ = ["Fetch", "TableWatcher", "decode_for", "decode_owned"]

log = structlog.get_logger("dataplane.sync.table_watcher")
Fetch = Callable[[str, str], Awaitable[Buffer | None]]


class TableWatcher:
    """The table loop of one router (module docstring)."""

    def __init__(
        self,
        router: Router,
        plans: PlanStore,
        cluster: ClusterStore,
        metrics: RouterMetrics,
        *,
        router_id: str,
        listen_address: str,
        interval_s: float = 2.0,
        ack_interval_s: float = 5.0,
        fetch: Fetch | None = None,
        decode_nice: int = 0,
    ) -> None:
        self._router = router
        self._fetch: Fetch = fetch or plans.get_table_bytes
        self._plans = plans
        self._cluster = cluster
        self._metrics = metrics
        self.router_id = router_id
        self.listen_address = listen_address
        self.interval_s = interval_s
        self.ack_interval_s = ack_interval_s
        self._dirty: set[str] = set()
        self._everything = True
        self._wake = asyncio.Event()
        self._rejected: dict[str, tuple[int, str]] = {}
        self._corrupt: set[str] = set()  # pools whose pointer record does not decode
        self.acks: dict[str, cluster_pb2.RouterAck] = {}
        self._unsent: set[str] = set()
        self._store_down = False
        # a full pass (pool set and every pool's pointer) has succeeded at least once
        self.synced = False
        self.last_error = ""
        self._decoder = DecodeThread(decode_nice)

    # -- triggers -------------------------------------------------------------------------------

    def request(self, pool: str | None = None) -> None:
        """Re-read ``pool``'s pointer soon (None: every pool, the pool set, and re-send ACKs)."""
        if pool is None:
            self._everything = True
            self._unsent.update(self.acks)
        elif POOL_PATTERN.match(pool):
            self._dirty.add(pool)
        else:
            log.warning("table hint for a malformed pool name ignored", pool=pool)
            return
        self._wake.set()

    async def run(self) -> None:
        last_heartbeat = time.monotonic()
        while True:
            await wait_event(self._wake, self.interval_s)
            self._wake.clear()
            everything = self._everything or not self._dirty
            pools = None if everything else sorted(self._dirty)
            self._everything = False
            self._dirty.clear()
            await self.sync(pools)
            if time.monotonic() - last_heartbeat >= self.ack_interval_s:
                last_heartbeat = time.monotonic()
                self._unsent.update(self.acks)
            await self.send_acks()

    # -- one pass -------------------------------------------------------------------------------

    async def sync(self, pools: list[str] | None = None) -> None:
        """Bring ``pools`` (None: the store's pool set and every known pool) to their pointers.

        When the store is unavailable the pass stops; every pool it did not reach counts one
        "error" update, and the next trigger tries again.
        """
        remaining = list(pools) if pools is not None else sorted(self._router.pools)
        try:
            if pools is None:
                for name in await self._plans.pools():
                    if POOL_PATTERN.match(name):  # the store validates; a bad name is skipped
                        self._router.add_pool(name)
                remaining = sorted(self._router.pools)
            while remaining:
                await self.sync_pool(remaining[0])
                remaining.pop(0)
        except StoreUnavailableError as exc:
            self.last_error = str(exc)
            for pool in remaining:
                self._metrics.table_update(pool, "error")
            if not self._store_down:
                log.warning("store unavailable; serving the tables held", error=str(exc))
            self._store_down = True
            return
        if self._store_down:
            log.info("store reachable again")
        self._store_down = False
        if pools is None:
            self.synced = True

    async def sync_pool(self, pool: str) -> None:
        try:
            pointer = await self._plans.get_active(pool)
        except DecodeError as exc:
            self._corrupt_pointer(pool, exc)
            return
        if pool in self._corrupt:
            self._corrupt.discard(pool)
            log.info("active pointer record readable again", pool=pool)
        if pointer is None:
            self._announce(pool)
            return
        state = self._router.add_pool(pool)
        wanted = (pointer.generation, pointer.version)
        if wanted == (state.table_generation, state.table_version):
            if pool not in self.acks:  # serving it already (e.g. applied before a restart)
                self._ack(pointer, accepted=True, reason="")
            return
        if wanted == self._rejected.get(pool):
            return
        if pointer.generation < state.table_generation:
            log.warning(
                "active pointer went backwards; following the store",
                pool=pool,
                serving=state.table_generation,
                pointer=pointer.generation,
            )
        if not pointer.version:  # planned routing disabled: drop the table, Flat-LB answers
            previous = [self._router.clear_table(pool, pointer.generation)]
            await self._decoder.run(previous.clear)
            self._rejected.pop(pool, None)
            self._metrics.table_update(pool, "applied")
            log.info("table removed: plan disabled", pool=pool, generation=pointer.generation)
            self._ack(pointer, accepted=True, reason="")
            return
        started = time.perf_counter()
        table = await from_delta(
            self._plans, self._metrics, self._decoder.run, pool, state.table, pointer.version
        )
        if table is not None:
            await self._install(pool, table, pointer, started, "delta")
            return
        try:
            data = await self._fetch(pool, pointer.version)
        except ValueError as exc:  # the pointer names no valid version
            self._rejected[pool] = wanted
            self._metrics.table_update(pool, "rejected")
            log.warning("active pointer rejected", pool=pool, reason=str(exc)[:120])
            self._ack(pointer, accepted=False, reason=str(exc)[:200])
            return
        if data is None:
            self._metrics.table_update(pool, "error")
            self._ack(pointer, accepted=False, reason=f"plan {pointer.version} has no table bytes")
            return
        self._metrics.table_fetched(pool, "full", len(data))
        try:
            box, data = [data], None
            table = await self._decoder.run(decode_owned, box, pool, pointer.version)
        except TableError as exc:
            self._rejected[pool] = wanted
            self._metrics.table_update(pool, "rejected")
            log.warning(
                "table rejected", pool=pool, version=pointer.version,
                generation=pointer.generation, reason=str(exc),
            )  # fmt: skip
            self._ack(pointer, accepted=False, reason=str(exc))
            return
        await self._install(pool, table, pointer, started, "full")

    async def _install(
        self,
        pool: str,
        table: RoutingTable,
        pointer: cluster_pb2.ActivePointer,
        started: float,
        source: str,
    ) -> None:
        previous = [self._router.install_table(pool, table, pointer.generation)]
        # Counted with the swap, before the next await: whoever sees the new table sees the count.
        self._rejected.pop(pool, None)
        self._metrics.table_update(pool, "applied")
        await self._decoder.run(previous.clear)  # free the old arrays off the serving thread
        log.info(
            "table applied", pool=pool, version=table.version, generation=pointer.generation,
            keys=table.num_keys, source=source,
            decode_ms=round((time.perf_counter() - started) * 1000, 1),
        )  # fmt: skip
        self._ack(pointer, accepted=True, reason="")

    def _announce(self, pool: str) -> None:
        """No plan in ``pool`` yet: ACK generation 0, so ``status`` lists this router."""
        self._router.add_pool(pool)
        if pool not in self.acks:
            self._ack(cluster_pb2.ActivePointer(pool=pool), accepted=True, reason="")

    def _corrupt_pointer(self, pool: str, exc: Exception) -> None:
        self._router.add_pool(pool)
        self._metrics.table_update(pool, "rejected")
        if pool in self._corrupt:
            return
        self._corrupt.add(pool)
        reason = f"active pointer record is corrupt: {str(exc)[:80]}"
        log.warning("active pointer rejected", pool=pool, reason=reason)
        self._ack(cluster_pb2.ActivePointer(pool=pool), accepted=False, reason=reason)

    def close(self) -> None:
        self._decoder.close()

    # -- ACK/NACK -------------------------------------------------------------------------------

    def _ack(self, pointer: cluster_pb2.ActivePointer, *, accepted: bool, reason: str) -> None:
        state = self._router.pools[pointer.pool]
        self.acks[pointer.pool] = cluster_pb2.RouterAck(
            router_id=self.router_id,
            pool=pointer.pool,
            version=pointer.version,
            generation=pointer.generation,
            accepted=accepted,
            reason=reason,
            serving_version=state.table_version,
            serving_generation=state.table_generation,
            listen_address=self.listen_address,
        )
        self._unsent.add(pointer.pool)

    async def send_acks(self) -> None:
        """Write the ACKs not yet written (or due again), stamped now; failures wait a beat."""
        for pool in sorted(self._unsent):
            ack = self.acks[pool]
            ack.at_unix_ms = int(time.time() * 1000)
            try:
                await self._cluster.put_ack(ack)
            except StoreUnavailableError:
                self._metrics.ack_errors.inc()
                return
            self._unsent.discard(pool)
