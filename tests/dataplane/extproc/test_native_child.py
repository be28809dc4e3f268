"""The native transport's process as the router supervises it (the real binary).

A child that dies (SIGKILL) is detected: its streams end and release their holds, readiness goes
NOT_SERVING (seen through the health server's Watch), the child is started again on the same port
and readiness comes back; a stopped router stops its child (SIGTERM) and leaves no process
behind. And the option: ``--extproc-native BINARY``, refused with TLS (the child serves none).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dataplane.__main__ import config_from, parse_args
from dataplane.extproc.native_bridge import NativeExtProcServer
from servekit.options import SettingsError
from servekit.processes import pid_alive
from tests.support import extproc as m
from tests.support.certs import make_certs
from tests.support.extproc_native import require_binary
from tests.support.native_picker import native_picker, process
from tests.support.picker_stream import picker
from tests.support.polling import eventually

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(90)]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def readiness(server: NativeExtProcServer) -> int:
    assert server.health is not None
    async with grpc.aio.insecure_channel(server.health.address) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="readiness"), timeout=5
        )
    return int(answer.status)


async def readiness_changes(server: NativeExtProcServer, count: int) -> list[int]:
    """The first ``count`` readiness statuses the health server's Watch sends."""
    assert server.health is not None
    seen: list[int] = []
    async with grpc.aio.insecure_channel(server.health.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="readiness")
        )
        async for answer in watch:
            if not seen or seen[-1] != answer.status:
                seen.append(int(answer.status))
            if len(seen) == count:
                watch.cancel()
                break
    return seen


async def test_a_killed_child_is_restarted_and_readiness_follows_it() -> None:
    ctx = picker()
    async with native_picker(require_binary(), ctx, health_listen="127.0.0.1:0") as server:
        assert await readiness(server) == SERVING
        port = server.port
        child = server.child_pid
        assert child is not None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = ext_grpc.ExternalProcessorStub(channel).Process(timeout=20)
            await call.write(m.request_headers({"x-cacheroute-key": "held"}))
            assert m.picked([await call.read()])
            assert ctx.holds.open_count  # the stream holds its pick
            seen_down = False

            async def restarted() -> bool:
                nonlocal seen_down
                seen_down = seen_down or not server.connected
                return server.child_pid not in (None, child) and server.connected

            watch = asyncio.create_task(readiness_changes(server, 3))
            await asyncio.sleep(0.2)  # the watch has its first answer
            os.kill(child, signal.SIGKILL)
            await eventually(restarted, timeout=20)
            assert seen_down
            assert await asyncio.wait_for(watch, 10) == [SERVING, NOT_SERVING, SERVING]
            with pytest.raises(grpc.aio.AioRpcError):
                await call.read()  # the stream died with its process
        assert not ctx.holds.open_count  # ...and released what it held
        assert server.port == port
        restarts = ctx.registry.get_sample_value("cacheroute_router_extproc_native_restarts_total")
        assert restarts == 1.0

        async def ready() -> bool:
            return bool(await readiness(server) == SERVING)

        await eventually(ready, timeout=10)
        sent = [m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)]
        assert m.picked(await process(port, sent))
        last = server.child_pid
    assert last is not None
    assert not pid_alive(last)  # stopped with the router


def test_the_native_option_reaches_the_config_and_refuses_tls(tmp_path: Path) -> None:
    base = ["--extproc-listen", "127.0.0.1:9002"]
    got = config_from(parse_args([*base, "--extproc-native", "/opt/extproc_native"], {}))
    assert got.extproc is not None and got.extproc.native == "/opt/extproc_native"
    assert config_from(parse_args(base, {})).extproc.native is None  # type: ignore[union-attr]
    certs = make_certs(tmp_path)
    tls = [
        "--tls-cert",
        str(certs["server"]),
        "--tls-key",
        str(certs["server"].with_suffix(".key")),
    ]
    with pytest.raises(SettingsError, match="--extproc-native serves no TLS"):
        config_from(parse_args([*base, "--extproc-native", "/opt/x", *tls], {}))
