"""Serving engines: one aiohttp site per engine, several engines on one event loop.

The local cluster runs eight engines in one process (one Python interpreter instead of eight
keeps a 2-core machine's CPU for the work); docker-compose runs one per container. Each engine
has its own simulated node, prefix cache, metrics registry and port; with ``kv_events_port`` set,
each also publishes vLLM's KV-cache events (:mod:`simengine.kv_events`): engine *i* of the process
on ``kv_events_port + 2i`` and its replay socket on the next port (0: any free ports, logged).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from servekit.addresses import parse_host_port
from sim.engine_model import EngineProfile
from simengine.api import EngineApi
from simengine.kv_events import KvEventPublisher
from simengine.realtime_engine import SimEngine

SHUTDOWN_TIMEOUT_S = 2.0  # in-flight handlers get this long to finish once the engine stopped


@dataclass(frozen=True)
class EngineOptions:
    """What every engine of a process shares."""

    profile: EngineProfile
    model: str
    speedup: float = 1.0
    stream_interval_s: float = 0.0
    kv_events_port: int | None = None  # None: no KV events


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port); raises ValueError naming the value."""
    try:
        return parse_host_port(listen)
    except ValueError as exc:
        raise ValueError(f"--listen {listen!r}: {exc}") from None


class EngineServer:
    """One engine behind one listening socket; ``await start()``, then ``port`` is bound."""

    def __init__(self, listen: str, options: EngineOptions, *, index: int = 0) -> None:
        self.host, self.port = split_listen(listen)
        self.kv_events: KvEventPublisher | None = None
        if options.kv_events_port is not None:
            base = options.kv_events_port
            port, replay = (base + 2 * index, base + 2 * index + 1) if base else (0, 0)
            self.kv_events = KvEventPublisher(self.host, port=port, replay_port=replay)
        self.engine = SimEngine(options.profile, speedup=options.speedup, kv_events=self.kv_events)
        self.api = EngineApi(
            self.engine, model=options.model, stream_interval_s=options.stream_interval_s
        )
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        if self.kv_events is not None:
            self.kv_events.start()
        self.engine.start()
        runner = web.AppRunner(
            self.api.app(),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        if self.port == 0 and runner.addresses:
            self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        await self.engine.stop()
        if self.kv_events is not None:
            await self.kv_events.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
