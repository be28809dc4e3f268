"""Hostile input to a router subprocess: oversized, over-long and malformed messages.

Before issue 9 a router took 256 MiB messages (six concurrent 100 MB Route calls took it from
75 MiB to 1.2 GiB), echoed a 10 MB pool name in its error and stored any request id, and answered
malformed bytes with UNKNOWN and a traceback per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cacheroute.v1 import cluster_pb2, routing_pb2, routing_pb2_grpc
from cacheroute_state import open_stores
from cacheroute_state.embedded import EmbeddedRedis
from tests.support.faults import Fleet, Proc

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.slow, pytest.mark.timeout(120)]

MB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def router(tmp_path: Path) -> Iterator[tuple[Proc, str]]:
    redis = EmbeddedRedis().start()
    fleet = Fleet(tmp_path / "logs")
    try:
        stores = open_stores(redis.url)
        snapshot = cluster_pb2.LoadSnapshot(
            pool="default", seq=1, leader_term=1,
            nodes=[cluster_pb2.NodeLoad(node_id="n0", address="n0:1", healthy=True)],
        )  # fmt: skip
        asyncio.run(_publish(stores, snapshot))
        proc = fleet.router("router", redis.url)
        address = asyncio.run(proc.logged("router serving", "address"))[0]
        yield proc, address
    finally:
        fleet.stop()
        redis.stop()


async def _publish(stores: object, snapshot: cluster_pb2.LoadSnapshot) -> None:
    await stores.cluster.publish_load(snapshot)  # type: ignore[attr-defined]
    await stores.close()  # type: ignore[attr-defined]


async def test_oversized_route_calls_are_refused_and_router_memory_stays_bounded(
    router: tuple[Proc, str],
) -> None:
    proc, address = router
    options = [("grpc.max_send_message_length", 64 * MB)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        assert (await stub.Route(routing_pb2.RouteRequest(key="k"))).node_id == "n0"
        assert proc.pid is not None
        before = rss_bytes(proc.pid)
        huge = routing_pb2.RouteRequest(key="k", prompt_prefix="x" * (20 * MB))
        calls = [stub.Route(huge, timeout=20) for _ in range(6)]
        results = await asyncio.gather(*calls, return_exceptions=True)
        codes = {r.code() for r in results if isinstance(r, grpc.aio.AioRpcError)}
        assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED}, results
        assert rss_bytes(proc.pid) - before < 40 * MB  # 120 MB were sent at it
        assert (await stub.Route(routing_pb2.RouteRequest(key="k"))).node_id == "n0"


async def test_over_long_fields_are_invalid_argument_quoting_a_few_dozen_bytes(
    router: tuple[Proc, str],
) -> None:
    _, address = router
    async with grpc.aio.insecure_channel(address) as channel:
        stub = routing_pb2_grpc.RouterServiceStub(channel)
        for request in (
            routing_pb2.RouteRequest(key="k", request_id="r" * 100_000),
            routing_pb2.RouteRequest(pool="P" * MB, key="k"),
            routing_pb2.RouteRequest(key="k", prompt_prefix="p" * 70_000),
            routing_pb2.RouteRequest(key="k", prefix_blocks=list(range(9000))),
            routing_pb2.RouteRequest(key="k", model="m" * 1000),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Route(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert len(caught.value.details() or "") < 200, caught.value.details()[:300]
        batch = routing_pb2.RouteBatchRequest(
            requests=[routing_pb2.RouteRequest(key="k"),
                      routing_pb2.RouteRequest(key="k", request_id="r" * 300)]
        )  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError, match=r"requests\[1\]: request_id"):
            await stub.RouteBatch(batch)


async def test_malformed_bytes_are_invalid_argument_with_one_log_line_and_no_traceback(
    router: tuple[Proc, str],
) -> None:
    proc, address = router
    async with grpc.aio.insecure_channel(address) as channel:
        for method in ("Route", "RouteBatch"):
            call = channel.unary_unary(
                f"/cacheroute.v1.RouterService/{method}",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            bad_utf8 = b"\x12\x02\xc3\x28" if method == "Route" else b"\x0a\x03\x12\x01\xff"
            for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05ab", bad_utf8):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(garbage)
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await asyncio.sleep(0.2)
    assert len(proc.events("malformed request")) == 6
    assert "Traceback" not in proc.log_path.read_text()
