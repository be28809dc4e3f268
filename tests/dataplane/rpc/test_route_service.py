"""The router over real gRPC: status codes, rollouts, NACKs, loads, reports (on the state twin;
the rollout, the reports and TLS also on a real Redis)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cacheroute.v1 import routing_pb2, routing_pb2_grpc, table_pb2
from cacheroute_state import Stores
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import table_to_proto
from servekit.tls import ClientTlsConfig, TlsConfig
from tests.support.factories import metadata_for, small_plan, store_plan
from tests.support.polling import eventually
from tests.support.router import (
    NODES,
    ack_of,
    follows,
    load_snapshot,
    rollout,
    router_stub,
    running_router,
    scrape,
    warm_keys,
)
from tests.support.state import on_redis

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


# -- bad input ----------------------------------------------------------------------------------


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


# -- tables -------------------------------------------------------------------------------------


@on_redis
async def test_a_rollout_is_applied_on_its_hint_and_answers_follow_each_generation(
    state_url: str, stores: Stores
) -> None:
    tables = [small_plan(seed=s) for s in (1, 2)]
    v1, v2 = [await store_plan(stores, t) for t in tables]
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        first = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
        assert first.reason == routing_pb2.ROUTE_REASON_NO_TABLE
        for version, table, generation in ((v1, tables[0], 1), (v2, tables[1], 2)):
            assert await rollout(stores, version) == generation

            async def applied(version: str = version) -> bool:
                reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
                return reply.version == version

            await eventually(applied, timeout=5.0)  # only the hint: the poll is 60 s (QUIET)
            for key in warm_keys(table):
                decision = await stub.Route(routing_pb2.RouteRequest(key=key, request_id=key))
                assert (decision.version, decision.generation) == (version, generation)
                assert decision.reason == routing_pb2.ROUTE_REASON_WARM
                assert follows(table, key, decision)
                assert (decision.key, decision.request_id) == (key, key)
                assert decision.address == f"{decision.node_id}.engines:8000"

            async def acked(generation: int = generation) -> bool:  # sent after the swap
                ack = await ack_of(stores)
                return bool(ack and ack.generation == generation)

            await eventually(acked)
            ack = await ack_of(stores)
            assert (ack.version, ack.generation, ack.accepted) == (version, generation, True)
            assert (ack.serving_version, ack.listen_address) == (version, server.address)
        back = await rollout(stores, v1)  # a rollback is a new, higher generation
        await eventually(lambda: _serving(stub, v1, back), timeout=5.0)
        metrics = scrape(server)
    assert 'cacheroute_router_table_generation{pool="default"} 3.0' in metrics
    assert f'cacheroute_router_table_info{{pool="default",version="{v1}"}} 1.0' in metrics
    assert 'cacheroute_router_table_updates_total{pool="default",result="applied"} 3.0' in metrics


async def _serving(stub: Any, version: str, generation: int) -> bool:
    reply = await stub.Route(routing_pb2.RouteRequest(key="key-1"))
    return bool(reply.version == version and reply.generation == generation)


def corrupt_members(table: RoutingTable) -> bytes:
    msg = table_to_proto(table)
    members = np.frombuffer(msg.set_members, dtype="<u2").copy()
    members[0] = 999
    msg.set_members = members.tobytes()
    return msg.SerializeToString()


async def test_an_invalid_table_is_nacked_and_the_last_good_one_keeps_serving(
    state_url: str, stores: Stores
) -> None:
    good, broken = small_plan(seed=1), small_plan(seed=2)
    v1 = await store_plan(stores, good)
    garbage_meta = table_pb2.PlanMetadata(
        pool="default", version="p00000000000000aa", content_hash="0" * 64
    )
    await stores.plans.put_plan(b"\x08\x01garbage, not a table", garbage_meta)
    await stores.plans.put_plan(corrupt_members(broken), metadata_for(broken))
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    await rollout(stores, v1)
    async with (
        running_router(state_url, table_interval_s=0.1) as server,
        router_stub(server) as stub,
    ):
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        for version, reason in (
            ("p00000000000000aa", "not a RoutingTable protobuf"),
            (broken.version, "a set member is 999; there are 4 nodes"),
        ):
            generation = await rollout(stores, version)

            async def nacked(version: str = version, generation: int = generation) -> bool:
                ack = await ack_of(stores)
                return bool(ack and ack.generation == generation and not ack.accepted)

            await eventually(nacked)
            ack = await ack_of(stores)
            assert ack.version == version
            assert reason in ack.reason
            assert (ack.serving_version, ack.serving_generation) == (v1, 1)
            for key in warm_keys(good):
                decision = await stub.Route(routing_pb2.RouteRequest(key=key))
                assert (decision.version, decision.generation) == (v1, 1)
                assert follows(good, key, decision)
        await asyncio.sleep(0.5)  # several timer ticks: a rejected generation is not re-fetched
        metrics = scrape(server)
    assert 'cacheroute_router_table_updates_total{pool="default",result="rejected"} 2.0' in metrics


async def test_a_router_started_after_a_rollout_serves_it_from_its_first_request(
    state_url: str, stores: Stores
) -> None:
    table = small_plan(seed=3)
    version = await store_plan(stores, table)
    generation = await rollout(stores, version)
    await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
    key = warm_keys(table)[0]
    async with running_router(state_url, router_id="late") as server, router_stub(server) as stub:
        decision = await stub.Route(routing_pb2.RouteRequest(key=key))
        assert (decision.version, decision.generation) == (version, generation)
        assert decision.reason == routing_pb2.ROUTE_REASON_WARM
        assert follows(table, key, decision)
        ack = await ack_of(stores, "late")
        assert (ack.version, ack.accepted) == (version, True)


# -- loads and pools ----------------------------------------------------------------------------


async def test_load_snapshots_steer_a_warm_key_to_the_least_loaded_member(
    state_url: str, stores: Stores
) -> None:
    table = small_plan(seed=1, q_cap=0.1)  # low q_cap: hot keys get several destinations
    key = next(k for k in warm_keys(table) if len(table.destination_ids(hash_key(k)) or []) > 1)
    members = table.destination_ids(hash_key(key)) or []
    await rollout(stores, await store_plan(stores, table))
    loads = dict.fromkeys(NODES, 50.0)
    await stores.cluster.publish_load(load_snapshot({**loads, members[0]: 0.0}, seq=1))
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        assert (await stub.Route(routing_pb2.RouteRequest(key=key))).node_id == members[0]
        await stores.cluster.publish_load(load_snapshot({**loads, members[1]: 0.0}, seq=2))

        async def moved() -> bool:
            return (await stub.Route(routing_pb2.RouteRequest(key=key))).node_id == members[1]

        await eventually(moved)  # only the pushed snapshot: the poll is 60 s (QUIET)
        metrics = scrape(server)
    line = f'cacheroute_router_node_load{{node="{members[0]}",pool="default"}} '
    shown = next(row for row in metrics.splitlines() if row.startswith(line))
    assert float(shown.split()[-1]) >= 50.0  # the snapshot's load plus in-flight decisions


async def test_drained_and_unhealthy_nodes_are_not_chosen(state_url: str, stores: Stores) -> None:
    table = small_plan(seed=1)
    await rollout(stores, await store_plan(stores, table))
    snapshot = load_snapshot(
        dict.fromkeys(NODES, 0.0), seq=1, unhealthy=("node-0",), draining=("node-1", "node-2")
    )
    await stores.cluster.publish_load(snapshot)
    requests = [routing_pb2.RouteRequest(key=f"key-{i}") for i in range(20)]
    requests += [routing_pb2.RouteRequest(key=f"tail-{i}") for i in range(200)]
    async with running_router(state_url) as server, router_stub(server) as stub:
        reply = await stub.RouteBatch(routing_pb2.RouteBatchRequest(requests=requests))
    assert {d.node_id for d in reply.decisions} == {"node-3"}
    assert [d.key for d in reply.decisions] == [r.key for r in requests]


async def test_a_pool_added_later_becomes_known_then_routable(
    state_url: str, stores: Stores
) -> None:
    async with running_router(state_url) as server, router_stub(server) as stub:
        await asyncio.wait_for(server.hints_connected.wait(), 5)
        request = routing_pb2.RouteRequest(pool="blue", key="key-1")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Route(request)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        table = small_plan("blue", seed=4)
        await rollout(stores, await store_plan(stores, table), pool="blue")  # adds the pool

        async def unavailable() -> bool:
            try:
                await stub.Route(request)
            except grpc.aio.AioRpcError as exc:
                return exc.code() == grpc.StatusCode.UNAVAILABLE
            return False

        await eventually(unavailable)
        await stores.cluster.publish_load(
            load_snapshot(dict.fromkeys(NODES, 0.0), seq=1, pool="blue")
        )

        async def routed() -> bool:
            try:
                reply = await stub.Route(request)
            except grpc.aio.AioRpcError:
                return False
            return bool(reply.version == table.version)

        await eventually(routed)


# -- reports, samples, health -------------------------------------------------------------------


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
    subprocess.run(
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
