"""Waiting for SIGTERM/SIGINT in an asyncio process: every server's graceful stop.

Apart from :mod:`servekit.grpc_server` so that processes without a gRPC server (the simulated
engines) do not import grpc to wait for a signal.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Sequence


async def wait_for_signal(signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> int:
    """Wait until one of ``signals`` arrives; returns its number."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[int] = loop.create_future()

    def on_signal(sig: int) -> None:
        if not received.done():
            received.set_result(sig)

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await received
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def run_until_signal(stop: Callable[[], Awaitable[None]]) -> int:
    """Block until SIGTERM/SIGINT, then run ``stop`` (the graceful shutdown)."""
    sig = await wait_for_signal()
    await stop()
    return sig
