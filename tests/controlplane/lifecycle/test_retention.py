"""The automatic retention policy (--plan-retention): the leader's prune of every pool keeps the
newest N, the active version, the rollback target and the live guard's versions."""

from __future__ import annotations

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.retention import prune_all
from dataplane.core.table_codec import encode_table
from tests.support.factories import metadata_for, small_plan


async def test_the_automatic_policy_prunes_every_pool_but_never_what_is_in_use(
    state_stores: Stores,
) -> None:
    stores = state_stores
    versions = []
    for seed in range(8):
        table = small_plan(seed=seed)
        meta = metadata_for(table)
        meta.created_at_unix_ms = 1_000 + seed  # a strict creation order
        await stores.plans.put_plan(encode_table(table), meta)
        versions.append(table.version)
    for generation, version in enumerate(versions[:3]):  # active v2, rollback target v1
        await stores.plans.move_active(
            "default", version, expected_generation=generation, actor="a", action="rollout"
        )
    await stores.plans.put_guard(
        cluster_pb2.GuardState(pool="default", version=versions[3], from_version=versions[2])
    )
    await prune_all(stores, 2, now_ms=5)
    left = {m.version for m in await stores.plans.list_plans("default", 100)}
    assert left == {versions[7], versions[6], versions[3], versions[2], versions[1]}
    (event,) = [e for e in await stores.plans.read_audit("default", 50) if e.action == "prune"]
    assert event.actor == "retention" and versions[0] in event.detail
    await prune_all(stores, 0, now_ms=6)  # 0: off
    assert len(await stores.plans.list_plans("default", 100)) == 5
