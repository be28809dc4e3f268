"""smg (the SGLang model gateway's 2026 cache-aware rule) and smg_events (its KV-event mode):
a miss goes to the least-loaded node; a match to the least-loaded holder unless the holder trips
the per-candidate gate (over 1.5 x mean and mean + 64), then to the least-loaded cool node."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies import make_policy
from dataplane.core.policies.base import Reason, Request
from dataplane.core.policies.smg import SmgEventsPolicy, SmgPolicy

NODES = NodeSet([f"n{i}" for i in range(6)])
PROMPT = tuple(range(100, 120))  # 20 chained blocks


def view(loads: Sequence[float]) -> LoadView:
    v = LoadView(NODES)
    v.apply_snapshot(0.0, loads)
    return v


def test_a_miss_goes_to_the_least_loaded_node_not_the_smallest_tree() -> None:
    policy = SmgPolicy()
    v = view([3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    other = Request(1, tuple(range(500, 520)))
    policy.route(other, v, 0.0)  # node 1's tree is no longer the smallest
    v.apply_snapshot(1.0, [3.0, 1.0, 2.0, 5.0, 4.0, 6.0])
    assert policy.choose(Request(2, PROMPT), v) == (1, Reason.CACHE_MISS)


def test_a_match_goes_to_the_least_loaded_holder() -> None:
    policy = SmgPolicy()
    v = view([10.0, 12.0, 1.0, 1.0, 1.0, 1.0])
    for node in (0, 1):
        policy.observe(
            Request(7, PROMPT), policy.choose(Request(7, PROMPT), v)._replace(node=node), v
        )
    assert policy.choose(Request(7, (*PROMPT, 999)), v) == (0, Reason.CACHE_MATCH)


def test_a_holder_over_both_margins_spills_to_the_least_loaded_cool_node() -> None:
    policy = SmgPolicy()
    loads = [200.0, 1.0, 3.0, 2.0, 5.0, 4.0]  # mean 35.8: 200 > 1.5 x 35.8 and > 35.8 + 64
    v = view(loads)
    policy.observe(Request(7, PROMPT), policy.choose(Request(7, PROMPT), v)._replace(node=0), v)
    assert policy.choose(Request(7, PROMPT), v) == (1, Reason.BALANCE)
    calm = view([90.0, 60.0, 60.0, 60.0, 60.0, 60.0])  # 90 > 1.5 x 65 is false: no spill
    assert policy.choose(Request(7, PROMPT), calm) == (0, Reason.CACHE_MATCH)


def test_a_short_match_under_the_threshold_is_a_miss() -> None:
    policy = SmgPolicy()
    v = view([5.0, 1.0, 5.0, 5.0, 5.0, 5.0])
    policy.observe(
        Request(7, PROMPT[:2]), policy.choose(Request(7, PROMPT[:2]), v)._replace(node=0), v
    )
    assert policy.choose(Request(7, PROMPT), v) == (1, Reason.CACHE_MISS)  # 2/20 <= 0.3


class Caches:
    """Resident leading runs per node, as a KV-event consumer would know them."""

    def __init__(self, held: dict[int, int]) -> None:
        self.held = held

    def resident_prefix(self, node: int, blocks: Sequence[int]) -> int:
        return min(self.held.get(node, 0), len(blocks))


def test_events_route_on_the_longest_resident_prefix_then_load() -> None:
    policy = make_policy("smg_events")
    assert isinstance(policy, SmgEventsPolicy)
    v = view([4.0, 3.0, 2.0, 1.0, 9.0, 9.0])
    assert policy.choose(Request(7, PROMPT), v) == (3, Reason.CACHE_MISS)  # no residency yet
    policy.residency = Caches({0: 5, 1: 12, 2: 12, 3: 1})
    assert policy.choose(Request(7, PROMPT), v) == (2, Reason.CACHE_MATCH)


@pytest.mark.parametrize("name", ["smg", "smg_events"])
def test_routers_with_the_same_history_decide_the_same(name: str) -> None:
    a, b = make_policy(name, seed=1), make_policy(name, seed=2)
    loads = [3.0, 1.0, 2.0, 5.0, 4.0, 6.0]
    va, vb = view(loads), view(loads)  # each router its own view of one snapshot
    for i in range(50):
        request = Request(i % 7, tuple(range(i % 7 * 100, i % 7 * 100 + 10)))
        assert a.route(request, va, float(i)) == b.route(request, vb, float(i))
