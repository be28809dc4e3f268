"""Watch lists from the active plan and the routers' samples (controlplane/lifecycle/
residency_watch.py), on the in-memory state twin: refreshed at most every ``refresh_ms``,
recomputed on a new version, and sent once per change per stream."""

from __future__ import annotations

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.lifecycle.residency_watch import WatchLists, WatchSender
from tests.support.factories import small_plan, store_plan
from tests.support.router import rollout


def sample(key_hash: int, blocks: list[int]) -> cluster_pb2.SampledRequest:
    return cluster_pb2.SampledRequest(pool="default", key_hash=key_hash, prefix_blocks=blocks)


async def test_each_node_watches_its_planned_keys_with_their_anchors(state_stores: Stores) -> None:
    table = small_plan(nodes=3, keys=6)
    watches = WatchLists(state_stores, refresh_ms=1_000)
    assert await watches.for_node("default", "node-0", 0) == ("", [])  # no active plan
    version = await store_plan(state_stores, table)
    await rollout(state_stores, version)
    keys = [int(k) for k in table.key_hashes]
    await state_stores.telemetry.add_samples(
        [sample(keys[0], [10, 11, 12]), sample(keys[0], [10, 11, 99]), sample(keys[1], [20])]
    )
    assert await watches.for_node("default", "node-0", 500) == ("", [])  # not refreshed yet
    lists = {}
    for node in table.node_ids:
        got_version, lists[node] = await watches.for_node("default", node, 1_000)
        assert got_version == version
    for row, key in ((0, keys[0]), (1, keys[1])):
        anchor = {keys[0]: 11, keys[1]: 20}[key]
        for member in table.members(row):
            assert (key, anchor) in lists[table.node_ids[member]]
    assert sum(len(v) for v in lists.values()) == len(table.members(0)) + len(table.members(1))


def test_a_stream_is_sent_a_watch_only_when_it_changed() -> None:
    sender = WatchSender()
    assert not sender.changed("", [])  # no plan: nothing to send
    assert sender.changed("p1", [(1, 2)])
    assert not sender.changed("p1", [(1, 2)])
    assert sender.changed("p1", [(1, 2), (3, 4)])
    assert sender.changed("p2", [(1, 2), (3, 4)])
