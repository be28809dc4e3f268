"""The consistent-hash ring: point layout, clockwise lookup, balance and minimal movement."""

from __future__ import annotations

import pytest

from dataplane.core.keys import hash_key
from dataplane.core.load_view import NodeSet, NoEligibleNodeError
from dataplane.core.policies.ring import VNODES, Ring, ring_for, splitmix64

NODES_30 = NodeSet([f"node-{i}" for i in range(30)])
KEYS = [hash_key(f"key-{i}") for i in range(20_000)]


def home(ring: Ring, key_hash: int) -> str:
    return ring.nodes.ids[ring.owners[ring.position(key_hash)]]


def shares(ring: Ring) -> list[float]:
    """Each node's fraction of the hash space times n (1.0 = a fair share)."""
    owned = [0] * len(ring.nodes)
    points = ring.points
    for j, point in enumerate(points):
        previous = points[j - 1] if j else points[-1] - 2**64  # the arc wraps past zero
        owned[ring.owners[j]] += point - previous
    return [share / 2**64 * len(ring.nodes) for share in owned]


@pytest.mark.parametrize(
    ("x", "expected"),
    [(0, 0xE220A8397B1DCDAF), (0x9E3779B97F4A7C15, 0x6E789E6AA1B965F4)],
)
def test_splitmix64_matches_the_reference_sequence(x: int, expected: int) -> None:
    # The first two outputs of SplitMix64 seeded with 0 (java.util.SplittableRandom).
    assert splitmix64(x) == expected


def test_each_node_owns_vnodes_points_at_hash_key_of_id_hash_i() -> None:
    ring = Ring(NodeSet(["a", "b"]))
    assert len(ring.points) == 2 * VNODES
    assert ring.points == sorted(ring.points)
    expected = sorted(
        (hash_key(f"{node}#{i}"), idx) for idx, node in enumerate(["a", "b"]) for i in range(256)
    )
    assert list(zip(ring.points, ring.owners, strict=True)) == expected


def test_lookup_takes_the_first_point_at_or_after_the_hash_and_wraps() -> None:
    ring = Ring(NodeSet(["a", "b", "c"]))
    assert ring.position(ring.points[5]) == 5  # a hash exactly on a point belongs to that point
    assert ring.position(ring.points[5] + 1) == 6
    assert ring.position(ring.points[-1] + 1) == 0  # past the largest point: wrap to the first
    assert ring.position(0) == 0


def test_walk_yields_every_node_once_starting_with_the_owner() -> None:
    ring = Ring(NODES_30)
    for key_hash in KEYS[:50]:
        order = list(ring.walk(key_hash))
        assert sorted(order) == list(range(30))
        assert order[0] == ring.owners[ring.position(key_hash)]


def test_first_eligible_skips_unhealthy_draining_and_excluded_nodes() -> None:
    ring = Ring(NODES_30)
    key_hash = KEYS[0]
    order = list(ring.walk(key_hash))
    healthy = [True] * 30
    draining = [False] * 30
    healthy[order[0]] = False
    draining[order[1]] = True
    assert ring.first_eligible(key_hash, healthy, draining) == order[2]
    assert ring.first_eligible(key_hash, healthy, draining, exclude=order[2]) == order[3]
    with pytest.raises(NoEligibleNodeError):
        ring.first_eligible(key_hash, [False] * 30, draining)


@pytest.mark.parametrize("size", [3, 10, 30])
def test_each_node_owns_about_one_nth_of_the_ring(size: int) -> None:
    ring = Ring(NodeSet([f"node-{i}" for i in range(size)]))
    assert all(0.8 <= share <= 1.2 for share in shares(ring))


def test_one_virtual_node_per_node_is_far_from_balanced() -> None:
    # The balance check above discriminates: without virtual nodes it fails.
    spread = shares(Ring(NODES_30, vnodes=1))
    assert max(spread) > 2.0 or min(spread) < 0.2


def test_adding_a_node_moves_only_the_keys_the_new_node_takes() -> None:
    before = Ring(NODES_30)
    after = Ring(NodeSet([*NODES_30.ids, "node-30"]))
    moved = [k for k in KEYS if home(before, k) != home(after, k)]
    assert all(home(after, k) == "node-30" for k in moved)
    assert 0.5 / 31 < len(moved) / len(KEYS) < 1.5 / 31


def test_removing_a_node_moves_only_its_own_keys() -> None:
    before = Ring(NODES_30)
    after = Ring(NodeSet([n for n in NODES_30.ids if n != "node-7"]))
    for key_hash in KEYS[:5000]:
        if home(before, key_hash) != "node-7":
            assert home(after, key_hash) == home(before, key_hash)


def test_ring_for_reuses_the_ring_of_the_same_nodeset_object_only() -> None:
    ring = ring_for(None, NODES_30)
    assert ring_for(ring, NODES_30) is ring
    same_members = NodeSet(NODES_30.ids)  # a membership change always makes a new NodeSet
    rebuilt = ring_for(ring, same_members)
    assert rebuilt is not ring
    assert rebuilt.nodes is same_members
    assert ring_for(ring, NODES_30, vnodes=16) is not ring


def test_vnodes_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="vnodes"):
        Ring(NODES_30, vnodes=0)
