"""The router over real gRPC: status codes, reports, samples, health, metrics and TLS (on the
state twin; the reports and TLS also on a real Redis). Tables are in test_route_service_tables.py,
loads and pools in test_route_service_loads.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cacheroute.v1 import routing_pb2, routing_pb2_grpc
from cacheroute_state import Stores
from servekit.tls import ClientTlsConfig, TlsConfig
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    load_snapshot,
    router_stub,
    running_router,
    scrape,
)
from tests.support.state import on_redis
from tests.support.timing import run_patiently

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


async def test_bad_input_gets_status_codes_with_messages(state_url: str) -> None:
    bad: list[tuple[Any, grpc.StatusCode, str]] = [
        (routing_pb2.RouteRequest(pool="Bad!", key="k"), grpc.StatusCode.INVALID_ARGUMENT,
         "pool 'Bad!' does not match"),
        (routing_pb2.RouteRequest(key="k" * 513), grpc.StatusCode.INVALID_ARGUMENT,
         "key is 513 bytes; the limit is 512"),
        (routing_pb2.RouteRequest(key="~mine"), grpc.StatusCode.INVALID_ARGUMENT,
         "must not start with '~'"),
        (routing_pb2.RouteRequest(model="m"), grpc.StatusCode.INVALID_ARGUMENT,
         "no key and no prompt_prefix"),
        (routing_pb2.RouteRequest(pool="nope", key="k"), grpc.StatusCode.NOT_FOUND,
         "pool 'nope' is not known"),
        (routing_pb2.RouteRequest(key="k"), grpc.StatusCode.UNAVAILABLE,
         "pool 'default' has no destinations yet"),
    ]  # fmt: skip
    async with running_router(state_url) as server, router_stub(server) as stub:
        for request, code, message in bad:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Route(request)
            assert raised.value.code() == code
            assert message in str(raised.value.details())
        too_many = routing_pb2.RouteBatchRequest(
            requests=[routing_pb2.RouteRequest(key="k")] * 1001
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.RouteBatch(too_many)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "batch has 1001 requests; the limit is 1000" in str(raised.value.details())
        one_bad = routing_pb2.RouteBatchRequest(
            requests=[routing_pb2.RouteRequest(key="k")] * 3 + [routing_pb2.RouteRequest()]
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.RouteBatch(one_bad)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(raised.value.details()).startswith("requests[3]: ")
        metrics = scrape(server)
    assert 'cacheroute_router_route_errors_total{code="INVALID_ARGUMENT"} 6.0' in metrics
    assert 'cacheroute_router_route_errors_total{code="NOT_FOUND"} 1.0' in metrics


@on_redis
async def test_traffic_reports_and_samples_reach_redis_and_stay_bounded(
    state_url: str, stores: Stores
) -> None:
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    # A sample write may take up to its interval (then it is dropped): 1 s, not 0.1 s, so a busy
    # machine's slow Redis round trip does not drop the one batch this test waits for.
    overrides = {"report_interval_s": 0.2, "sample_interval_s": 1.0, "sample_rate": 1.0,
                 "sample_buffer": 100, "top_keys": 8}  # fmt: skip
    keys = [f"tenant-{i % 50}" for i in range(1000)]
    batch = routing_pb2.RouteBatchRequest(
        requests=[routing_pb2.RouteRequest(key=k, request_id=str(i)) for i, k in enumerate(keys)]
    )
    async with running_router(state_url, **overrides) as server, router_stub(server) as stub:
        await stub.RouteBatch(batch)

        async def reported() -> bool:
            _, reports = await stores.telemetry.read_traffic("default", "0")
            return sum(r.total_requests for r in reports) == 1000

        await eventually(reported, timeout=20)
        await eventually(lambda: _samples_at_least(stores, 100), timeout=20)
        metrics = scrape(server)
    _, reports = await stores.telemetry.read_traffic("default", "0")
    assert all(len(r.top_keys) <= 8 and r.router_id == "r1" for r in reports)
    top = next(r for r in reports if r.total_requests).top_keys[0]
    assert top.count >= 20 and top.key.startswith("tenant-")
    samples = await stores.telemetry.read_samples("default", 1000)
    assert len(samples) == 100  # the buffer holds 100; the other 900 were dropped and counted
    assert {s.router_id for s in samples} == {"r1"}
    assert samples[0].request_id == "0" and samples[0].node_id in NODES
    assert 'cacheroute_router_reports_dropped_total{kind="samples"} 900.0' in metrics


async def _samples_at_least(stores: Stores, count: int) -> bool:
    return len(await stores.telemetry.read_samples("default", 1000)) >= count


async def test_health_serves_and_metrics_show_decisions_and_latency(
    state_url: str, stores: Stores
) -> None:
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    async with running_router(state_url) as server, router_stub(server) as stub:
        async with grpc.aio.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "cacheroute.v1.RouterService"):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            listed = reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
            async for answer in listed:
                names = {s.name for s in answer.list_services_response.service}
                assert "cacheroute.v1.RouterService" in names
        for i in range(5):
            await stub.Route(routing_pb2.RouteRequest(key=f"k{i}"))
        metrics = scrape(server)
    labels = 'policy="cacheroute",pool="default",reason="no_table"'
    assert f"cacheroute_router_decisions_total{{{labels}}} 5.0" in metrics
    assert 'cacheroute_router_decision_seconds_count{pool="default"} 5.0' in metrics
    assert 'cacheroute_router_load_snapshot_age_seconds{pool="default"}' in metrics


@on_redis
async def test_with_tls_options_the_router_serves_over_tls(
    state_url: str, stores: Stores, tmp_path: Path
) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    run_patiently(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    tls = TlsConfig(cert_file=cert, key_file=key)
    async with running_router(state_url, tls=tls) as server:
        credentials = ClientTlsConfig(ca_file=cert).channel_credentials()
        async with grpc.aio.secure_channel(server.address, credentials) as channel:
            stub = routing_pb2_grpc.RouterServiceStub(channel)
            reply = await stub.Route(routing_pb2.RouteRequest(key="k"))
        assert reply.node_id in NODES
        async with grpc.aio.insecure_channel(server.address) as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await routing_pb2_grpc.RouterServiceStub(plain).Route(
                    routing_pb2.RouteRequest(key="k"), timeout=2
                )
