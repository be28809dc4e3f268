"""The embedded Redis of a one-machine control plane: kept alive, and described without secrets.

Apart from the wiring (:mod:`controlplane.server.process`): restarting the store on the same port
with the same data is what lets every client simply reconnect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from cacheroute_state.embedded import EmbeddedRedis, EmbeddedRedisError
from cacheroute_state.urls import redacted

log = structlog.get_logger("controlplane")
EMBEDDED_CHECK_S = 0.5


def describe_store(redis_url: str, embedded: EmbeddedRedis | None) -> str:
    """The store as `cachectl status` shows it (never with a password)."""
    text = redacted(redis_url)
    if embedded is not None:
        data_dir = embedded.data_dir
        where = f"AOF in {data_dir}" if data_dir else "not persistent"
        text += f" (embedded, supervised, {where})"
    return text


async def supervise_embedded(embedded: EmbeddedRedis, stopping: Callable[[], bool]) -> None:
    """Restart the embedded Redis when it dies (same port, same data): clients reconnect."""
    while not stopping():
        await asyncio.sleep(EMBEDDED_CHECK_S)
        if embedded.running() or stopping():
            continue
        log.warning(
            "embedded redis exited; restarting it",
            returncode=embedded.returncode,
            restarts=embedded.restarts,
        )
        embedded.restart()
        try:
            await asyncio.to_thread(embedded.wait_ready)
        except EmbeddedRedisError as exc:
            log.error("embedded redis did not restart; retrying", error=str(exc))
            await asyncio.sleep(1.0)
            continue
        log.info("embedded redis restarted", pid=embedded.pid, redis_url=redacted(embedded.url))
