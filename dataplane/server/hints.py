"""The router's hint subscription: what wakes the watchers between their ticks.

Apart from the process (:mod:`dataplane.server.process`) because it is the one loop that reads the
store's push channel: "table" wakes the table watcher for a pool, "load" hands the snapshot to the
load watcher, "pools"/"resync" wake everything. A lost subscription reconnects with backoff
(0.1 s doubling to 5 s), and the new subscription's "resync" re-reads everything.
"""

from __future__ import annotations

import asyncio

import structlog

from cacheroute_state.interfaces import HintKind, HintSource, StoreUnavailableError
from dataplane.sync.load_watcher import LoadWatcher
from dataplane.sync.table_watcher import TableWatcher

log = structlog.get_logger("dataplane.server")
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0


async def hint_loop(
    hints: HintSource, tables: TableWatcher, loads: LoadWatcher, connected: asyncio.Event
) -> None:
    """Follow the store's hints forever; ``connected`` is set while a subscription is live."""
    backoff = BACKOFF_MIN_S
    while True:
        try:
            async for hint in hints.subscribe(None):
                if hint.kind is HintKind.RESYNC:
                    backoff = BACKOFF_MIN_S
                    connected.set()
                    tables.request(None)
                    loads.request()
                elif hint.kind is HintKind.TABLE:
                    tables.request(hint.pool)
                elif hint.kind is HintKind.LOAD:
                    await loads.apply_payload(hint.pool, hint.payload)
                elif hint.kind is HintKind.POOLS:
                    tables.request(None)
        except StoreUnavailableError as exc:
            connected.clear()
            log.debug("hint subscription lost", error=str(exc), retry_s=backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, BACKOFF_MAX_S)
