"""Leadership: one instance leads, the others take over when it stops renewing or leaves."""

from __future__ import annotations

import asyncio
import time

import pytest

from cacheroute_state import Stores
from controlplane.cluster.leader import LeaderElector
from controlplane.metrics import ControlPlaneMetrics
from controlplane.server import ControlPlane
from tests.support.controlplane import fast_config
from tests.support.polling import eventually
from tests.support.state import on_redis
from tests.support.timing import LagMeter


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    """This module's logic runs on the in-memory state twin; ``@on_redis`` tests on real Redis."""
    return state_stores


def elector(stores: Stores, name: str, ttl_s: float = 0.5) -> LeaderElector:
    return LeaderElector(stores.leases, name, ttl_s=ttl_s, metrics=ControlPlaneMetrics())


async def test_one_holder_and_takeover_after_the_ttl(stores: Stores, lag: LagMeter) -> None:
    a, b = elector(stores, "a"), elector(stores, "b")
    assert await a.tick() and not await b.tick()
    assert a.term == 1 and b.term == 0
    started = time.monotonic()
    await asyncio.sleep(0.45)  # a does not renew: it stops counting itself leader first...
    assert not a.is_leader
    while not await b.tick():  # ...and b gets the lease once it expires
        await asyncio.sleep(0.02)
    took = time.monotonic() - started
    assert took >= 0.45  # never before the TTL: a lower bound a busy machine cannot break
    lag.claim(took < 1.5, f"b took the lease {took:.2f} s after a's last renewal (TTL 0.5 s)")
    assert b.term == 1
    assert not await a.tick()
    assert await stores.leases.holder("controlplane") == "b"


async def test_release_hands_over_at_once_and_a_new_term_starts(stores: Stores) -> None:
    a, b = elector(stores, "a", ttl_s=30), elector(stores, "b", ttl_s=30)
    assert await a.tick()
    await a.release()
    assert not a.is_leader
    assert await b.tick()
    await b.release()
    assert await a.tick() and a.term == 2


@pytest.mark.grpc
@on_redis
async def test_two_instances_one_leads_and_the_other_takes_over(
    state_url: str, stores: Stores
) -> None:
    first = ControlPlane(fast_config(state_url, instance_id="cp-1"))
    second = ControlPlane(fast_config(state_url, instance_id="cp-2"))
    await first.start()
    await second.start()
    try:

        def leaders() -> list[str]:
            return [p.instance_id for p in (first, second) if p.leader and p.leader.is_leader]

        async def one_leader() -> bool:
            return len(leaders()) == 1

        await eventually(one_leader)
        leader, follower = (first, second) if leaders() == ["cp-1"] else (second, first)
        assert await stores.leases.holder("controlplane") == leader.instance_id
        assert leader.metrics.leader._value.get() == 1  # type: ignore[attr-defined]

        await stores.plans.add_pool("default")
        await leader.stop()  # graceful: releases the lease

        async def follower_leads() -> bool:
            return follower.leader is not None and follower.leader.is_leader

        took = await eventually(follower_leads, timeout=5)
        assert took < 1.5  # at most one renewal period after the release
        seq = await stores.cluster.get_load("default") or None

        async def publishing() -> bool:
            snap = await stores.cluster.get_load("default")
            return snap is not None and (seq is None or snap.seq > seq.seq)

        await eventually(publishing)
    finally:
        await first.stop()
        await second.stop()
