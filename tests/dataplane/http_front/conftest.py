"""Four real `python -m simengine` engines and a real router (Redis, gRPC) with its HTTP front."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from dataplane.http_front.app import FrontConfig
from dataplane.server import RouterConfig, RouterServer
from servekit.processes import free_port
from tests.support.router import PAPER_DISPATCH, QUIET, load_snapshot
from tests.support.timing import StartDeadline

START_TIMEOUT_S = 60.0  # seconds of the machine's time (tests/support/timing.py)


class SimEngines:
    """``count`` simulated engines, one process each (so one can be killed alone)."""

    def __init__(self, count: int, *args: str) -> None:
        self.ports = [free_port() for _ in range(count)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for port in self.ports:
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "simengine",
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--log-level",
                        "warning",
                        *args,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def wait_ready(self) -> None:
        with StartDeadline(START_TIMEOUT_S) as deadline:
            self._wait_ready(deadline)

    def _wait_ready(self, deadline: StartDeadline) -> None:
        for port, proc in zip(self.ports, self.procs, strict=True):
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"simengine on port {port} exited with {proc.returncode}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                        break
                except OSError:
                    if deadline.expired():
                        pytest.fail(f"simengine on port {port} not ready in {deadline.describe()}")
                    time.sleep(0.05)

    def kill(self, index: int) -> None:
        proc = self.procs[index]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def engines() -> Iterator[SimEngines]:
    started = SimEngines(4, "--speedup", "4")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def shared_engines() -> Iterator[SimEngines]:
    """Engines shared by a module's tests that do not kill or pause any."""
    started = SimEngines(4, "--speedup", "4")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def node_ids(count: int = 4) -> list[str]:
    return [f"node-{i}" for i in range(count)]


def snapshot(
    addresses: list[str], *, seq: int, loads: list[float] | None = None, pool: str = "default"
) -> cluster_pb2.LoadSnapshot:
    """Nodes ``node-0``.. at ``addresses``, idle unless ``loads`` says otherwise."""
    ids = node_ids(len(addresses))
    return load_snapshot(
        dict(zip(ids, loads or [0.0] * len(ids), strict=True)),
        seq=seq,
        pool=pool,
        addresses=dict(zip(ids, addresses, strict=True)),
    )


@asynccontextmanager
async def running_front(
    redis_url: str,
    stores: Stores,
    addresses: list[str],
    pool: str = "default",
    router: dict[str, Any] | None = None,
    **front: Any,
) -> AsyncIterator[RouterServer]:
    """A router with its HTTP front; the pool's members are ``addresses`` (one snapshot)."""
    config = RouterConfig(
        **{**QUIET, **PAPER_DISPATCH, **(router or {})},
        listen="127.0.0.1:0",
        redis_url=redis_url,
        router_id="front-test",
        grace_s=0.5,
        http=FrontConfig(listen="127.0.0.1:0", **front),
    )
    server = RouterServer(config)
    await server.start()
    try:
        await stores.cluster.publish_load(snapshot(addresses, seq=1, pool=pool))
        with StartDeadline(10) as deadline:  # patience (tests/support/timing.py)
            while pool not in server.router.pools or len(
                server.router.pools[pool].view.eligible_nodes
            ) < len(addresses):
                if deadline.expired():
                    pytest.fail(
                        f"the router never applied the load snapshot: {deadline.describe()}"
                    )
                await asyncio.sleep(0.01)
        yield server
    finally:
        await server.stop()


def front_url(server: RouterServer) -> str:
    assert server.http is not None
    return f"http://127.0.0.1:{server.http.port}"
