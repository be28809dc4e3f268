"""Values validated as a whole (issue 23, failures 4 and 5 and the forged hint of 8), injected
for real: a real control plane (gRPC on port 0) and router watcher on a real Redis.

* ``running = waiting = 1e308`` each passed the checks but summed to infinity, and every router
  rejected the pool's snapshots: now such a report is INVALID_ARGUMENT.
* A stored snapshot with ``leader_term = 2^64 - 1`` made the next leader fail every tick
  (``Value out of range``) while routers stayed on the forged membership: now the leader starts
  a fresh epoch and routers refuse the impossible term.
* A forged future snapshot on the hint channel steered every decision: now a hint only wakes the
  watcher, which applies the stored record.
"""

from __future__ import annotations

import grpc
import pytest
import redis as redis_py

from cacheroute.v1 import agent_pb2_grpc, cluster_pb2
from cacheroute_state import open_stores, schema
from dataplane.core.router import Router
from dataplane.sync.load_watcher import LoadWatcher
from dataplane.telemetry.router_metrics import RouterMetrics
from tests.support.controlplane import fast_config, report, running
from tests.support.polling import eventually

pytestmark = [pytest.mark.redis, pytest.mark.grpc, pytest.mark.timeout(60)]
MAX_UINT64 = 2**64 - 1


def snapshot(term: int, seq: int, *nodes: tuple[str, float]) -> cluster_pb2.LoadSnapshot:
    return cluster_pb2.LoadSnapshot(
        pool="default", seq=seq, leader_term=term, observed_at_unix_ms=1,
        nodes=[cluster_pb2.NodeLoad(node_id=n, address=f"10.0.0.{i}:8000", load=load,
                                    healthy=True) for i, (n, load) in enumerate(nodes)],
    )  # fmt: skip


async def test_loads_whose_sum_overflows_are_refused_at_the_report(redis_url: str) -> None:
    async with (
        running(fast_config(redis_url)) as plane,
        grpc.aio.insecure_channel(plane.address) as channel,
    ):
        call = agent_pb2_grpc.AgentServiceStub(channel).Connect()
        bad = report("n1", address="10.0.0.1:8000")
        bad.running = bad.waiting = 1e308
        await call.write(bad)
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "running must be in [0, 1e+09]" in (await call.details() or "")


async def test_a_stored_term_at_the_maximum_starts_a_fresh_epoch(redis_url: str) -> None:
    stores = open_stores(redis_url)
    try:
        await stores.plans.add_pool("default")
        await stores.cluster.publish_load(snapshot(MAX_UINT64, MAX_UINT64, ("forged", 0.0)))
        async with running(fast_config(redis_url)):

            async def fresh() -> bool:
                stored = await stores.cluster.get_load("default")
                return stored is not None and stored.leader_term == 1 and stored.seq >= 2

            await eventually(fresh)
    finally:
        await stores.close()
    router = Router(policy="flat")
    with pytest.raises(ValueError, match="beyond any real one"):
        router.apply_load(snapshot(MAX_UINT64, 1, ("forged", 0.0)))


async def test_a_forged_hint_is_replaced_by_the_stored_snapshot(redis_url: str) -> None:
    stores = open_stores(redis_url)
    try:
        real = snapshot(3, 10, ("a", 5.0), ("b", 5.0))
        await stores.cluster.publish_load(real)
        router = Router(policy="flat")
        watcher = LoadWatcher(router, stores.cluster, RouterMetrics("flat"))
        forged = snapshot(99, 1, ("evil", 0.0))
        client = redis_py.Redis.from_url(redis_url)
        client.publish(schema.load_channel("default"), forged.SerializeToString())  # as a forger
        client.close()
        await watcher.apply_payload("default", forged.SerializeToString())
        view = router.pools["default"].view
        assert view.nodes.ids == ("a", "b")
        assert router.pools["default"].load_order == (3, 10)
    finally:
        await stores.close()
