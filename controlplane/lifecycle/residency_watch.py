"""Which planned keys each agent watches: the active plan's keys per node with their anchors.

Any instance may hold an agent's stream, so each computes the lists itself, per pool, from the
active plan and the routers' newest sampled requests (:func:`controlplane.core.residency.
prefix_anchors`), at most every ``refresh_ms`` (the pointer is read then; the table and samples
again only when the version changed or ``recompute_ms`` passed, since samples keep arriving).
An agent session sends its node's list in a directive whenever it differs from the last one
sent on that stream (:class:`WatchSender`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from cacheroute.v1 import agent_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import StoreError
from controlplane.core.residency import prefix_anchors, watch_lists
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import decode_table

log = structlog.get_logger("controlplane.lifecycle.residency_watch")

MAX_SAMPLES = 5_000  # newest sampled requests read per computation


@dataclass
class _PoolWatch:
    version: str = ""
    checked_ms: int = -(10**18)
    computed_ms: int = -(10**18)
    lists: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    table: RoutingTable | None = None  # the decoded active plan (decoded once per version)


class WatchLists:
    """Per-pool watch lists of the active plan (module docstring)."""

    def __init__(
        self, stores: Stores, *, refresh_ms: int = 1_000, recompute_ms: int = 10_000
    ) -> None:
        self._stores = stores
        self._refresh_ms = refresh_ms
        self._recompute_ms = recompute_ms
        self._pools: dict[str, _PoolWatch] = {}
        self._lock = asyncio.Lock()

    async def for_node(
        self, pool: str, node_id: str, now_ms: int
    ) -> tuple[str, list[tuple[int, int]]]:
        """(active version, the node's (key, anchor) list); ("", []) without an active plan."""
        entry = self._pools.setdefault(pool, _PoolWatch())
        if now_ms - entry.checked_ms >= self._refresh_ms:
            async with self._lock:
                if now_ms - entry.checked_ms >= self._refresh_ms:
                    await self._refresh(pool, entry, now_ms)
        return entry.version, entry.lists.get(node_id, [])

    async def _refresh(self, pool: str, entry: _PoolWatch, now_ms: int) -> None:
        entry.checked_ms = now_ms
        try:
            active = await self._stores.plans.get_active(pool)
            version = active.version if active is not None else ""
            if version == entry.version and now_ms - entry.computed_ms < self._recompute_ms:
                return
            entry.computed_ms = now_ms
            if not version:
                entry.version, entry.lists, entry.table = "", {}, None
                return
            table = entry.table if version == entry.version else None
            if table is None:
                data = await self._stores.plans.get_table_bytes(pool, version)
                if data is None:
                    return
                table = await asyncio.to_thread(decode_table, data, verify_hash=False)
            samples = await self._stores.telemetry.read_samples(pool, MAX_SAMPLES)
        except StoreError as exc:
            log.info("watch lists not refreshed", pool=pool, error=str(exc))
            return
        anchors = prefix_anchors((s.key_hash, list(s.prefix_blocks)) for s in samples)
        entry.version, entry.table = version, table
        entry.lists = watch_lists(table, anchors)


class WatchSender:
    """One stream's last sent watch: :meth:`changed` fills a directive when it is new."""

    def __init__(self) -> None:
        self._sent: tuple[str, tuple[tuple[int, int], ...]] | None = None

    def changed(self, version: str, watch: list[tuple[int, int]]) -> bool:
        current = (version, tuple(watch))
        if current == self._sent or not version:
            return False
        self._sent = current
        return True


def fill_directive(
    directive: agent_pb2.AgentDirective, version: str, watch: list[tuple[int, int]]
) -> None:
    directive.watch_version = version
    directive.watch.extend(agent_pb2.PrefixWatch(key_hash=k, anchor_block=a) for k, a in watch)
