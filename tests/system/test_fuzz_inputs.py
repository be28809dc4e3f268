"""Hypothesis fuzzing of what the outside world sends: Route, RouteBatch, NodeReport, tables.

Real servers (a router and a control-plane subprocess on 127.0.0.1, one real redis-server) get
arbitrary bytes and arbitrary well-formed messages. The claims: every call ends within its
deadline (no hang) with a status a caller can act on (never UNKNOWN or INTERNAL), the servers
survive, and the table decoder either returns a table or raises ``TableError``.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cacheroute.v1 import agent_pb2, agent_pb2_grpc, cluster_pb2, routing_pb2
from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from dataplane.core.table import TableError
from dataplane.core.table_codec import decode_table, encode_table
from tests.support.factories import small_plan
from tests.support.faults import Fleet, Proc

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(300)]

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
ACCEPTABLE = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.ALREADY_EXISTS,
}
text = st.text(max_size=80)
floats = st.floats(allow_nan=True, allow_infinity=True)
route_requests = st.builds(
    routing_pb2.RouteRequest,
    pool=st.one_of(st.just(""), st.just("default"), text),
    key=text,
    prompt_prefix=st.text(max_size=300),
    model=text,
    cache_salt=text,
    prefix_blocks=st.lists(st.integers(0, 2**64 - 1), max_size=40),
    request_id=text,
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Proc, Proc]]:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path_factory.mktemp("fuzz") / "logs")
    try:
        asyncio.run(_seed(redis.url))
        router = fleet.router("router", redis.url)
        cp = fleet.controlplane("cp", redis.url)
        router_address = asyncio.run(router.logged("router serving", "address"))[0]
        cp_address = asyncio.run(cp.logged("control plane serving", "listen"))[0]
        yield router_address, cp_address, router, cp
    finally:
        fleet.stop()
        redis.stop()


async def _seed(url: str) -> None:
    stores = open_stores(url)
    table = small_plan()
    await stores.cluster.publish_load(
        cluster_pb2.LoadSnapshot(pool="default", seq=1, leader_term=1, nodes=[
            cluster_pb2.NodeLoad(node_id=n, address=f"{n}:1", healthy=True)
            for n in table.node_ids])
    )  # fmt: skip
    await stores.close()


def _raw(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:  # type: ignore[type-arg]
    return channel.unary_unary(
        f"/cacheroute.v1.RouterService/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )


def _code(call: object, payload: object) -> grpc.StatusCode:
    try:
        call(payload, timeout=5.0)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


@FUZZ
@given(data=st.binary(max_size=2_000))
def test_arbitrary_bytes_to_route_and_route_batch(
    servers: tuple[str, str, Proc, Proc], data: bytes
) -> None:
    address, _, router, _ = servers
    with grpc.insecure_channel(address) as channel:
        for method in ("Route", "RouteBatch"):
            code = _code(_raw(channel, method), data)
            assert code in ACCEPTABLE, (method, code, data[:50])
    router.check()


@FUZZ
@given(requests=st.lists(route_requests, min_size=1, max_size=5))
def test_arbitrary_route_requests(
    servers: tuple[str, str, Proc, Proc], requests: list[routing_pb2.RouteRequest]
) -> None:
    address, _, router, _ = servers
    with grpc.insecure_channel(address) as channel:
        route = _raw(channel, "Route")
        for request in requests:
            assert _code(route, request.SerializeToString()) in ACCEPTABLE
        batch = routing_pb2.RouteBatchRequest(requests=requests)
        assert _code(_raw(channel, "RouteBatch"), batch.SerializeToString()) in ACCEPTABLE
    router.check()


node_reports = st.builds(
    agent_pb2.NodeReport,
    node_id=st.one_of(st.just("fuzz-node"), text),
    pool=st.one_of(st.just(""), text),
    address=st.one_of(st.just("127.0.0.1:9"), text),
    running=floats,
    waiting=floats,
    kv_usage=floats,
    weight=floats,
    report_interval_ms=st.integers(0, 2**32 - 1),
    healthy=st.booleans(),
    stale=st.booleans(),
    leaving=st.booleans(),
)


def _stream(cp_address: str, reports: list[agent_pb2.NodeReport]) -> grpc.StatusCode:
    with grpc.insecure_channel(cp_address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        outbox: queue.Queue[agent_pb2.NodeReport | None] = queue.Queue()
        for report in reports:
            outbox.put(report)
        outbox.put(None)
        call = stub.Connect(iter(outbox.get, None), timeout=5.0)
        try:
            for _ in call:
                pass
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK


@FUZZ
@given(reports=st.lists(node_reports, min_size=1, max_size=3))
def test_arbitrary_node_reports(
    servers: tuple[str, str, Proc, Proc], reports: list[agent_pb2.NodeReport]
) -> None:
    _, cp_address, _, cp = servers
    assert _stream(cp_address, reports) in ACCEPTABLE | {grpc.StatusCode.ABORTED}
    cp.check()


VALID = encode_table(small_plan())


@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(
        st.binary(max_size=4_000),
        st.tuples(st.integers(0, len(VALID) - 1), st.binary(min_size=1, max_size=8)).map(
            lambda t: VALID[: t[0]] + t[1] + VALID[t[0] + len(t[1]) :]
        ),
        st.integers(0, len(VALID)).map(lambda n: VALID[:n]),
    )
)
def test_the_table_decoder_returns_a_table_or_a_table_error(data: bytes) -> None:
    try:
        table = decode_table(data)
    except TableError:
        return
    assert table.num_keys >= 0


@FUZZ
@given(data=st.binary(min_size=1, max_size=500))
def test_arbitrary_bytes_on_the_agent_stream(
    servers: tuple[str, str, Proc, Proc], data: bytes
) -> None:
    _, cp_address, _, cp = servers
    with grpc.insecure_channel(cp_address) as channel:
        connect = channel.stream_stream(
            "/cacheroute.v1.AgentService/Connect",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            for _ in connect(iter([data]), timeout=5.0):
                pass
            code = grpc.StatusCode.OK
        except grpc.RpcError as exc:
            code = exc.code()
    assert code in ACCEPTABLE | {grpc.StatusCode.ABORTED}, code
    cp.check()


ADMIN_METHODS = [
    "PlanService/ImportPlan", "PlanService/Rollout", "PlanService/GetPlan",
    "PlanService/ListPlans", "NodeService/AddNode", "NodeService/SetDraining",
]  # fmt: skip


@FUZZ
@given(data=st.binary(min_size=1, max_size=500), method=st.sampled_from(ADMIN_METHODS))
def test_arbitrary_bytes_to_admin_methods(
    servers: tuple[str, str, Proc, Proc], data: bytes, method: str
) -> None:
    # Before: a request that failed to deserialize was INTERNAL with a traceback in the log.
    _, cp_address, _, cp = servers
    with grpc.insecure_channel(cp_address) as channel:
        call = channel.unary_unary(
            f"/cacheroute.v1.{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        code = _code(call, data)
    assert code in ACCEPTABLE | {grpc.StatusCode.FAILED_PRECONDITION}, code
    cp.check()


def test_the_servers_logged_no_traceback_and_still_run(
    servers: tuple[str, str, Proc, Proc],
) -> None:
    _, _, router, cp = servers
    for proc in (router, cp):
        assert "Traceback" not in Path(proc.log_path).read_text()
        proc.check()
