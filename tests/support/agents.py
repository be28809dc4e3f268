"""Real parts for the agent tests: an HTTP engine stub and a recording AgentService.

The engine stub is a real aiohttp server on port 0 that serves a sample from
tests/data/metrics/ (which sample can change between scrapes). The control plane is a real
``grpc.aio`` server (servekit's GrpcServer) with a minimal AgentService that records every report;
it stands in for controlplane/server/process.py, so an agent test needs neither Redis nor a planner.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from cacheroute.v1 import agent_pb2, agent_pb2_grpc
from servekit.grpc_server import GrpcServer
from tests.support.timing import StartDeadline

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "metrics"
DIALECT_SAMPLES = (
    "vllm_v1",
    "vllm_deprecated",
    "vllm_v0",
    "sglang_colon",
    "sglang_underscore",
    "sim",
)


def sample(name: str) -> str:
    return (SAMPLES / f"{name}.txt").read_text()


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout_s`` seconds of the
    machine's time (patience, tests/support/timing.py)."""
    with StartDeadline(timeout_s) as deadline:
        while not predicate():
            if deadline.expired():
                pytest.fail(f"condition not met in {deadline.describe()}")
            await asyncio.sleep(0.01)


class EngineStub:
    """A real HTTP server whose /metrics serves ``body`` (or ``status``, or hangs ``delay_s``)."""

    def __init__(self, body: str = "", content_type: str = "text/plain") -> None:
        self.body = body
        self.content_type = content_type
        self.status = 200
        self.delay_s = 0.0
        self.hits = 0
        self.accept = ""
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, sample_name: str) -> None:
        self.body = sample(sample_name)

    async def start(self, port: int = 0) -> EngineStub:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.accept = request.headers.get("Accept", "")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return web.Response(status=self.status, text="engine not ready")
        return web.Response(body=self.body.encode(), headers={"Content-Type": self.content_type})


class RecordingAgentService(agent_pb2_grpc.AgentServiceServicer):
    """Records (stream number, report); sends ``directive`` first on each stream if given."""

    def __init__(self, directive: agent_pb2.AgentDirective | None = None) -> None:
        self.directive = directive
        self.reports: list[tuple[int, agent_pb2.NodeReport]] = []
        self.streams = 0
        self.ended_streams = 0

    async def Connect(
        self,
        request_iterator: AsyncIterator[agent_pb2.NodeReport],
        context: object,
    ) -> AsyncIterator[agent_pb2.AgentDirective]:
        self.streams += 1
        stream = self.streams
        if self.directive is not None:
            yield self.directive
        async for report in request_iterator:
            self.reports.append((stream, report))
            if report.leaving:
                break
        self.ended_streams += 1

    def of(self, node_id: str) -> list[agent_pb2.NodeReport]:
        return [r for _, r in self.reports if r.node_id == node_id]


class ControlPlaneStub:
    """A real gRPC server with :class:`RecordingAgentService`; restartable on the same port."""

    def __init__(self, service: RecordingAgentService | None = None) -> None:
        self.service = service or RecordingAgentService()
        self.port = 0
        self._server: GrpcServer | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> ControlPlaneStub:
        server = GrpcServer(f"127.0.0.1:{self.port}", service_names=["cacheroute.v1.AgentService"])
        agent_pb2_grpc.add_AgentServiceServicer_to_server(self.service, server.server)
        await server.start()
        self.port = server.port
        self._server = server
        return self

    async def stop(self, grace_s: float = 0.0) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None


@pytest.fixture
async def engine() -> AsyncIterator[EngineStub]:
    stub = await EngineStub().start()
    yield stub
    await stub.close()


@pytest.fixture
async def controlplane() -> AsyncIterator[ControlPlaneStub]:
    stub = await ControlPlaneStub().start()
    yield stub
    await stub.stop()


EXPECTED = {
    "vllm_v1": (agent_pb2.METRIC_DIALECT_VLLM_V1, agent_pb2.ENGINE_KIND_VLLM),
    "vllm_deprecated": (agent_pb2.METRIC_DIALECT_VLLM_V0, agent_pb2.ENGINE_KIND_VLLM),
    "vllm_v0": (agent_pb2.METRIC_DIALECT_VLLM_V0, agent_pb2.ENGINE_KIND_VLLM),
    "sglang_colon": (agent_pb2.METRIC_DIALECT_SGLANG_COLON, agent_pb2.ENGINE_KIND_SGLANG),
    "sglang_underscore": (
        agent_pb2.METRIC_DIALECT_SGLANG_UNDERSCORE,
        agent_pb2.ENGINE_KIND_SGLANG,
    ),
    "sim": (agent_pb2.METRIC_DIALECT_SIMULATED, agent_pb2.ENGINE_KIND_SIMULATED),
}
