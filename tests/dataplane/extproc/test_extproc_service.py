"""The picker in a real router: Process over gRPC, the GIE health services, the options."""

from __future__ import annotations

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from dataplane.__main__ import config_from, parse_args
from dataplane.extproc.context import ExtProcConfig
from dataplane.openai_api.request_keys import DEFAULT_KEY_HEADERS
from servekit.options import SettingsError
from tests.support import extproc as m
from tests.support.polling import eventually
from tests.support.router import NODES, load_snapshot, running_router

pytestmark = pytest.mark.grpc
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def status(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
    return int(answer.status)


async def test_readiness_waits_for_the_first_sync_while_liveness_is_serving_at_once() -> None:
    redis = EmbeddedRedis()  # its port is chosen but nothing listens yet
    stores = open_stores(redis.url)
    config = ExtProcConfig(listen="127.0.0.1:0", health_listen="127.0.0.1:0")
    try:
        async with running_router(
            redis.url, startup_timeout_s=0.5, table_interval_s=0.2, load_interval_s=0.2,
            extproc=config,
        ) as server:  # fmt: skip
            assert server.extproc is not None and server.extproc.health is not None
            health = server.extproc.health.address
            picker = server.extproc.grpc.address
            assert await status(health, "liveness") == SERVING
            assert await status(health, "readiness") == NOT_SERVING
            assert (
                await status(health, "envoy.service.ext_proc.v3.ExternalProcessor") == NOT_SERVING
            )
            assert (
                await status(picker, "envoy.service.ext_proc.v3.ExternalProcessor") == NOT_SERVING
            )
            redis.start()
            await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

            async def ready() -> bool:
                return await status(health, "readiness") == SERVING

            await eventually(ready, timeout=15)
            assert await status(health, "envoy.service.ext_proc.v3.ExternalProcessor") == SERVING
            assert await status(health, "liveness") == SERVING

            async def routed() -> bool:
                return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

            await eventually(routed, timeout=15)
            async with grpc.aio.insecure_channel(picker) as channel:
                call = ext_grpc.ExternalProcessorStub(channel).Process(
                    iter([m.request_headers({"x-cacheroute-key": "k"}, end_of_stream=True)])
                )
                answers = [answer async for answer in call]
            assert m.picked(answers)[0].endswith(".engines:8000")
            await eventually(lambda: _empty(server.holds.open_count))
    finally:
        await stores.close()
        redis.stop()


async def _empty(counts: dict[tuple[str, str], int]) -> bool:
    return not counts


def test_the_picker_options_reach_the_router_config() -> None:
    assert config_from(parse_args([], {})).extproc is None
    argv = ["--extproc-listen", "0.0.0.0:9002", "--extproc-health-listen", "0.0.0.0:9003",
            "--extproc-pool", "chat", "--extproc-fallbacks", "1",
            "--key-header", "X-Tenant", "--key-header", "x-session-id",
            "--extproc-max-buffered", "4096", "--extproc-body-timeout", "7",
            "--extproc-allow-unauthenticated"]  # fmt: skip
    with pytest.raises(SettingsError, match="refusing to serve the Endpoint Picker on"):
        config_from(parse_args(argv, {}))  # protected mode covers the picker's port too
    argv.append("--allow-unauthenticated")
    got = config_from(parse_args(argv, {"CACHEROUTE_EXTPROC_MAX_BODY": "1024"}))
    assert got.extproc is not None
    assert (got.extproc.max_buffered_bytes, got.extproc.body_timeout_s) == (4096, 7.0)
    assert got.extproc.allow_unauthenticated
    assert (got.extproc.listen, got.extproc.health_listen) == ("0.0.0.0:9002", "0.0.0.0:9003")
    assert (got.extproc.pool, got.extproc.fallbacks, got.extproc.max_body_bytes) == (
        "chat",
        1,
        1024,
    )
    assert got.extproc.key_headers == ("x-tenant", "x-session-id")
    front = config_from(parse_args(["--http-listen", "127.0.0.1:0"], {})).http
    assert front is not None and front.key_headers == DEFAULT_KEY_HEADERS
    with pytest.raises(SettingsError, match="--extproc-health-listen needs --extproc-listen"):
        config_from(parse_args(["--extproc-health-listen", "0.0.0.0:9003"], {}))
    with pytest.raises(SettingsError, match="--extproc-pool"):
        config_from(parse_args(["--extproc-listen", ":9002", "--extproc-pool", "Bad!"], {}))
