"""Many simulated routers: each keeps its own policy state and load view; tables are shared.

This is what the many-routers study (docs/results.md §4) measures: prefix-history policies
(preble, sglang) see only their router's 1/N slice of the traffic, while a table policy's
routers read one shared plan and a stateless hash agrees by construction.
"""

from __future__ import annotations

from dataclasses import replace

from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from sim.cluster import Cluster, ClusterConfig
from sim.engine_model import LLAMA_70B
from sim.planning import make_stream, plan_for
from tests.support.tiny_workload import TinyWorkload

CONFIG = ClusterConfig(profile=LLAMA_70B, nodes=4, seed=3)


def test_each_router_has_its_own_policy_and_load_view_over_one_shared_table() -> None:
    stream = make_stream(TinyWorkload(), qps=20.0, duration_s=10, seed=2, prior_window_s=10)
    table = plan_for("lpt", stream, CONFIG.node_ids(), q_cap=5.0)
    assert table is not None
    cluster = Cluster(stream.requests, "cacheroute", replace(CONFIG, routers=4), table)
    routers = cluster.routers
    assert len({id(r.policy) for r in routers}) == len({id(r.view) for r in routers}) == 4
    assert all(r.view.table is not None and r.view.table.table is table for r in routers)
    draws = {r.policy.rng.random() for r in routers}  # seeded per router: no lock-step coins
    assert len(draws) == 4


def test_prefix_history_routers_learn_only_the_requests_they_routed() -> None:
    requests = TinyWorkload(shared_blocks=8).requests(qps=20.0, duration_s=10, seed=5)
    for policy in ("sglang", "preble"):
        cluster = Cluster(requests, policy, replace(CONFIG, routers=2))
        cluster.run()
        for r, router in enumerate(cluster.routers):
            assert isinstance(router.policy, PrefixHistoryPolicy)
            index = router.policy.index(router.view)
            for i, request in enumerate(requests):
                unique = request.blocks[-1]  # a block no other request has
                assert bool(index.holders(unique)) == (i % 2 == r), (policy, r, i)


def test_stateless_hash_routers_agree_by_construction() -> None:
    requests = TinyWorkload().requests(qps=20.0, duration_s=20, seed=7)
    routed = []
    for routers in (1, 4, 16):
        cluster = Cluster(requests, "sticky", replace(CONFIG, routers=routers))
        cluster.run()
        routed.append(cluster.routed)
    assert routed[0] == routed[1] == routed[2] and sum(routed[0]) > 100
