"""Four real `python -m simengine` engines and a real router (Redis, gRPC) with its HTTP front."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from dataplane.http_front.front_config import FrontConfig
from dataplane.server import RouterConfig, RouterServer
from tests.support.faults import logged_events
from tests.support.openai_clients import close_openai_clients  # noqa: F401 - autouse
from tests.support.router import PAPER_DISPATCH, QUIET, load_snapshot
from tests.support.timing import StartDeadline

START_TIMEOUT_S = 60.0  # seconds of the machine's time (tests/support/timing.py)


class SimEngines:
    """``count`` simulated engines, one process each (so one can be killed alone), each on a
    port it bound itself (``--listen 127.0.0.1:0``, read back from its log by
    :meth:`wait_ready`): a port picked here and bound later can be taken in between."""

    def __init__(self, count: int, *args: str) -> None:
        self.ports: list[int] = []  # known once wait_ready returns
        self._logs = Path(tempfile.mkdtemp(prefix="simengines-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        command = [sys.executable, "-m", "simengine", "--listen", "127.0.0.1:0",
                   "--log-format", "json", "--log-level", "info", *args]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for index in range(count):
            with (self._logs / f"engine-{index}.log").open("wb") as log:
                self.procs.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
                )

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def wait_ready(self) -> None:
        with StartDeadline(START_TIMEOUT_S) as deadline:
            self.ports = [self._wait_ready(i, deadline) for i in range(len(self.procs))]

    def _wait_ready(self, index: int, deadline: StartDeadline) -> int:
        """Engine ``index``'s port once it answers /health."""
        proc, log = self.procs[index], self._logs / f"engine-{index}.log"
        port = 0
        while True:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"simengine {index} exited with {proc.returncode}: {tail}")
            port = port or _serving_port(log)
            if port:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                        return port
                except OSError:
                    pass
            if deadline.expired():
                pytest.fail(f"simengine {index} not ready in {deadline.describe()}")
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
        shutil.rmtree(self._logs, ignore_errors=True)


def _serving_port(log: Path) -> int:
    """The port in the engine's "engine serving" line, or 0 before it is logged."""
    serving = logged_events(log, "engine serving")
    return int(str(serving[0]["url"]).rsplit(":", 1)[1].split("/")[0]) if serving else 0


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
