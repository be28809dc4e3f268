"""dataplane.health.health_feedback over real gRPC on a real Redis (issue 23, failure 3): anonymous
``Route(hold_until_release)`` + ``Release(CONNECT_FAILED)`` took 2 of 4 engines out of rotation
even with the router's ``--auth-file``. Now only its clients' outcomes count, and one caller can
eject at most a bounded share of a pool (1 of 4 at the default 0.25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cacheroute.v1 import routing_pb2
from cacheroute_state import Stores
from dataplane.core.outliers import OutlierConfig
from dataplane.health.health_feedback import parse_networks
from servekit.auth_file import load_auth_file, token_hash
from tests.support.network import non_loopback_ip
from tests.support.polling import eventually
from tests.support.router import NODES, load_snapshot, router_stub, running_router

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(60)]
OUTLIERS = OutlierConfig(consecutive_failures=2, base_ejection_s=60.0, max_ejection_s=60.0)
FAILED = routing_pb2.RELEASE_OUTCOME_CONNECT_FAILED


async def fail_every_node(stub: object, metadata: tuple[tuple[str, str], ...], rounds: int) -> None:
    """Hold-and-fail Route/Release pairs until each node has seen ``rounds`` failures."""
    for i in range(rounds * len(NODES) * 4):
        held = await stub.Route(  # type: ignore[attr-defined]
            routing_pb2.RouteRequest(key=f"k{i}", request_id=f"r{i}", hold_until_release=True),
            metadata=metadata,
        )
        assert held.node_id
        await stub.Release(  # type: ignore[attr-defined]
            routing_pb2.ReleaseRequest(request_id=f"r{i}", outcome=FAILED), metadata=metadata
        )


async def test_only_named_callers_eject_and_each_at_most_its_share(
    redis_url: str, stores: Stores, tmp_path: Path
) -> None:
    auth_path = tmp_path / "auth.yaml"
    auth_path.write_text(
        "".join(f"- {{name: {n}, role: read, sha256: {token_hash(t)}}}\n"
                for n, t in (("svc", "tok"), ("svc2", "tok2")))
    )  # fmt: skip
    auth_path.chmod(0o600)
    auth = load_auth_file(auth_path)
    async with running_router(redis_url, outliers=OUTLIERS, auth=auth) as server:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

        async def ready() -> bool:
            return len(server.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready)
        state = server.router.pools["default"]
        async with router_stub(server) as stub:
            await fail_every_node(stub, (), rounds=3)  # anonymous: released, not counted
            assert state.outliers.ejected == frozenset()
            await fail_every_node(stub, (("authorization", "Bearer tok"),), rounds=3)
            assert len(state.outliers.ejected) == 1  # svc's share of 4 engines
            await fail_every_node(stub, (("authorization", "Bearer tok2"),), rounds=3)
            assert len(state.outliers.ejected) == 2  # another named caller: its own share
        ignored = server.metrics.registry.get_sample_value(
            "cacheroute_router_health_feedback_ignored_total", {"reason": "unauthenticated"}
        )
        assert ignored == 3 * len(NODES) * 4
        assert server.holds.open_count == {}


async def test_an_allow_list_names_the_only_callers_whose_outcomes_count(
    redis_url: str, stores: Stores
) -> None:
    elsewhere = parse_networks("10.0.0.0/8")
    async with running_router(redis_url, outliers=OUTLIERS, health_feedback_from=elsewhere) as srv:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

        async def ready() -> bool:
            return len(srv.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready)
        async with router_stub(srv) as stub:
            await fail_every_node(stub, (), rounds=3)  # 127.0.0.1 is not on the list
        assert srv.router.pools["default"].outliers.ejected == frozenset()
    loopback = parse_networks("127.0.0.0/8")
    async with running_router(redis_url, outliers=OUTLIERS, health_feedback_from=loopback) as srv:
        await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=2))

        async def ready_again() -> bool:
            return len(srv.router.pools["default"].view.eligible_nodes) == len(NODES)

        await eventually(ready_again)
        async with router_stub(srv) as stub:
            await fail_every_node(stub, (), rounds=3)
        assert len(srv.router.pools["default"].outliers.ejected) == 1


async def test_without_auth_an_anonymous_caller_beyond_loopback_counts_only_when_opted_in(
    redis_url: str, stores: Stores
) -> None:
    """Issue 32: a default router let one anonymous caller eject one engine of four."""
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this host has no non-loopback address to call from")
    for anonymous, ejected in ((False, 0), (True, 1)):
        async with running_router(
            redis_url, listen=f"{ip}:0", outliers=OUTLIERS, health_feedback_anonymous=anonymous
        ) as server:
            await stores.cluster.publish_load(load_snapshot(dict.fromkeys(NODES, 0.0), seq=1))

            async def ready() -> bool:
                pools = server.router.pools
                return "default" in pools and len(pools["default"].view.eligible_nodes) == 4

            await eventually(ready)
            async with router_stub(server) as stub:
                await fail_every_node(stub, (), rounds=3)
            assert len(server.router.pools["default"].outliers.ejected) == ejected, anonymous
