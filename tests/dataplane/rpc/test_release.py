"""Route with hold_until_release, then Release, over real gRPC: completion-aware Route load."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cacheroute.v1 import routing_pb2
from cacheroute_state import Stores
from dataplane.core.outliers import OutlierConfig
from tests.support.polling import eventually
from tests.support.router import NODES, load_snapshot, router_stub, running_router

pytestmark = [pytest.mark.redis, pytest.mark.grpc]


async def test_a_held_route_counts_until_release_and_release_is_idempotent(
    redis_url: str, stores: Stores
) -> None:
    async with running_router(redis_url, correction_horizon_s=0.2) as server:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

        async def ready() -> bool:
            return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready)
        view = server.router.pools["default"].view
        async with router_stub(server) as stub:
            held = await stub.Route(
                routing_pb2.RouteRequest(key="k1", request_id="r-1", hold_until_release=True)
            )
            await stub.Route(routing_pb2.RouteRequest(key="k2", request_id="r-2"))
            node = view.nodes.index[held.node_id]

            await asyncio.sleep(0.3)  # past the 0.2 s horizon (time passing, not a wait)
            # a new decision expires those past the horizon: left are it and the held one
            probe = await stub.Route(routing_pb2.RouteRequest(key="probe"))
            loads = list(view.loads)
            loads[view.nodes.index[probe.node_id]] -= 1.0
            assert loads == [1.0 if i == node else 0.0 for i in range(len(NODES))]
            assert server.holds.open_count == {("default", held.node_id): 1}
            first = await stub.Release(routing_pb2.ReleaseRequest(request_id="r-1"))
            again = await stub.Release(routing_pb2.ReleaseRequest(request_id="r-1"))
            unknown = await stub.Release(routing_pb2.ReleaseRequest(request_id="nope"))
            assert (first.released, again.released, unknown.released) == (True, False, False)
            assert view.loads[node] <= 1.0  # at most the last probe is left on it
            assert server.holds.open_count == {}


async def test_hold_without_request_id_and_empty_release_are_invalid(
    redis_url: str, stores: Stores
) -> None:
    async with running_router(redis_url) as server:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))
        async with router_stub(server) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Route(routing_pb2.RouteRequest(key="k", hold_until_release=True))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request_id" in (caught.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.RouteBatch(
                    routing_pb2.RouteBatchRequest(
                        requests=[
                            routing_pb2.RouteRequest(key="a"),
                            routing_pb2.RouteRequest(key="b", hold_until_release=True),
                        ]
                    )
                )
            assert "requests[1]" in (caught.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Release(routing_pb2.ReleaseRequest())
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_held_batch_requests_are_each_released(redis_url: str, stores: Stores) -> None:
    async with running_router(redis_url) as server:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

        async def ready() -> bool:
            return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready)
        async with router_stub(server) as stub:
            requests = [
                routing_pb2.RouteRequest(key=f"k{i}", request_id=f"b{i}", hold_until_release=True)
                for i in range(6)
            ]
            await stub.RouteBatch(routing_pb2.RouteBatchRequest(requests=requests))
            assert sum(server.holds.open_count.values()) == 6
            for i in range(6):
                answer = await stub.Release(routing_pb2.ReleaseRequest(request_id=f"b{i}"))
                assert answer.released
            assert server.holds.open_count == {}
            assert sum(server.router.pools["default"].view.loads) == 0.0


async def test_release_outcomes_eject_a_failing_node_but_only_for_the_callers_own_holds(
    redis_url: str, stores: Stores
) -> None:
    outliers = OutlierConfig(consecutive_failures=2, base_ejection_s=60.0, max_ejection_s=60.0)
    async with running_router(redis_url, outliers=outliers) as server:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

        async def ready() -> bool:
            return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready)
        failed = routing_pb2.RELEASE_OUTCOME_CONNECT_FAILED
        async with router_stub(server) as stub:
            # a release that ends no hold (unknown or already released) reports nothing
            for _ in range(5):
                await stub.Release(routing_pb2.ReleaseRequest(request_id="nope", outcome=failed))
            assert server.router.pools["default"].outliers.ejected == frozenset()
            victim = ""
            for i in range(200):  # route held requests, failing those that land on one node
                answer = await stub.Route(
                    routing_pb2.RouteRequest(
                        key=f"k{i}", request_id=f"r{i}", hold_until_release=True
                    )
                )
                victim = victim or answer.node_id
                ok = answer.node_id != victim
                outcome = routing_pb2.RELEASE_OUTCOME_SUCCESS if ok else failed
                reply = await stub.Release(
                    routing_pb2.ReleaseRequest(request_id=f"r{i}", outcome=outcome)
                )
                assert reply.released
                if server.router.pools["default"].outliers.ejected:
                    break
            assert server.router.pools["default"].outliers.ejected == {victim}
            after = [
                (await stub.Route(routing_pb2.RouteRequest(key=f"x{i}"))).node_id for i in range(50)
            ]
            assert victim not in after
