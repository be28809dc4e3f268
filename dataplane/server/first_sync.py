"""The router's first sync with the store: bounded at start, then awaited before SERVING.

Apart from the process (:mod:`dataplane.server.process`) because it is the one rule about health:
until tables and loads have synced once the router is NOT_SERVING, Route answers UNAVAILABLE
naming the store it waits for and a warning says so every ``WAITING_LOG_S``; after that it stays
SERVING through later store outages (it routes on what it holds).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from cacheroute_state.interfaces import StoreUnavailableError
from cacheroute_state.urls import redacted
from dataplane.core.router import Router
from dataplane.sync.load_watcher import LoadWatcher
from dataplane.sync.table_watcher import TableWatcher

log = structlog.get_logger("dataplane.server")
WAITING_LOG_S = 5.0
SYNC_POLL_S = 0.1


class FirstSync:
    """Whether, and why not yet, the router has synced with the store once."""

    def __init__(
        self,
        router: Router,
        tables: TableWatcher,
        loads: LoadWatcher,
        redis_url: str,
        startup_timeout_s: float,
    ) -> None:
        self.router = router
        self.tables = tables
        self.loads = loads
        self.redis_url = redis_url
        self.startup_timeout_s = startup_timeout_s

    @property
    def synced(self) -> bool:
        """Whether a full sync of tables and loads with the store has succeeded once."""
        return self.tables.synced and self.loads.synced

    def not_synced_text(self) -> str:
        cause = self.tables.last_error or "no answer yet"
        return f"not synced with Redis at {redacted(self.redis_url)} ({cause})"

    async def initial(self) -> None:
        """Pools, tables and loads once, before serving; bounded so a dead Redis cannot block."""
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                await self.tables.sync(None)
                await self.loads.sync()
                await self.tables.send_acks()
        except (TimeoutError, StoreUnavailableError) as exc:
            if isinstance(exc, StoreUnavailableError):
                self.tables.last_error = str(exc)
            log.warning(
                "starting without a full sync: health NOT_SERVING until one succeeds",
                redis_url=redacted(self.redis_url),
                error=self.tables.last_error or repr(exc),
            )

    async def wait(self, serving: Callable[[], Awaitable[None]]) -> None:
        """Until the first full sync: NOT_SERVING, a warning every WAITING_LOG_S; then
        ``serving()`` (health SERVING), and parked until cancelled."""
        waited_since = last_log = asyncio.get_running_loop().time()
        while not self.synced:
            await asyncio.sleep(SYNC_POLL_S)
            if not self.loads.synced and self.tables.synced:
                self.loads.request()
            now = asyncio.get_running_loop().time()
            self.router.not_synced = self.not_synced_text()
            if now - last_log >= WAITING_LOG_S:
                last_log = now
                log.warning(
                    "not serving: waiting for the first sync with the store",
                    redis_url=redacted(self.redis_url),
                    error=self.tables.last_error or None,
                    waited_s=round(now - waited_since, 1),
                )
        self.router.not_synced = ""
        await serving()
        log.info("first sync with the store done; health SERVING", pools=sorted(self.router.pools))
        await asyncio.Event().wait()  # done; parked until stop() cancels it
