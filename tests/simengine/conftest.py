"""Fixtures of the simulated engine's tests: a real engine server (port 0) and an HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from sim.engine_model import LLAMA_8B
from simengine.server import EngineOptions, EngineServer
from tests.support.simengine_http import SPEEDUP


@pytest.fixture
async def server() -> AsyncIterator[EngineServer]:
    options = EngineOptions(
        profile=LLAMA_8B.with_overrides(kv_blocks=2000), model="sim-8b", speedup=SPEEDUP
    )
    srv = EngineServer("127.0.0.1:0", options)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
