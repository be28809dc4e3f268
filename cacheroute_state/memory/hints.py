"""HintSource in memory: each subscription is a queue on the state's hint bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from cacheroute_state.interfaces import Hint, HintKind, HintSource, StoreUnavailableError
from cacheroute_state.memory.state import MemoryState


class MemoryHintSource(HintSource):
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def subscribe(self, pools: Sequence[str] | None) -> AsyncIterator[Hint]:
        s = self._s
        s.check()
        wanted = None if pools is None else frozenset(pools)
        queue: asyncio.Queue[Hint | StoreUnavailableError] = asyncio.Queue()
        s.subscribers.add(queue)
        try:
            # Subscribed: as on Redis, the first hint says "re-read everything once".
            yield Hint(kind=HintKind.RESYNC, pool="", payload=b"")
            while True:
                item = await queue.get()
                if isinstance(item, StoreUnavailableError):
                    raise item
                if item.kind is HintKind.POOLS or wanted is None or item.pool in wanted:
                    yield item
        finally:
            s.subscribers.discard(queue)
