"""The simulator's front tier, session-token echo, SGLang tree sync and random cache-miss ties."""

from __future__ import annotations

from dataclasses import replace

from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.policies import Request
from dataplane.core.policies.prefix_history import PrefixHistoryPolicy
from dataplane.core.policies.sglang import SGLangPolicy
from sim.cluster import Cluster, ClusterConfig
from sim.engine_model import LLAMA_70B
from sim.planning import make_stream, plan_for
from sim.types import SimRequest
from tests.support.tiny_workload import TinyWorkload

CONFIG = ClusterConfig(profile=LLAMA_70B, nodes=4, seed=3)


def conversations(count: int, turns: int, gap_s: float = 2.0) -> list[SimRequest]:
    """``count`` conversations of one key, ``turns`` turns each, interleaved."""
    out = []
    for turn in range(turns):
        for c in range(count):
            blocks = tuple((c << 20) | b for b in range(4 * (turn + 1)))
            out.append(SimRequest(turn * gap_s + 0.01 * c, "k", 12345, blocks, 64 * (turn + 1),
                                  8, thread=c))  # fmt: skip
    return sorted(out, key=lambda r: r.arrival_s)


def test_key_and_session_fronts_keep_a_key_or_a_conversation_on_one_router() -> None:
    requests = conversations(12, 3)
    by_key = Cluster(requests, "flat", replace(CONFIG, routers=4, front="key"))
    assert len({by_key.front(i, r) for i, r in enumerate(requests)}) == 1
    by_session = Cluster(requests, "flat", replace(CONFIG, routers=4, front="session"))
    per_thread: dict[int, set[int]] = {}
    for i, r in enumerate(requests):
        per_thread.setdefault(r.thread, set()).add(by_session.front(i, r))
    assert all(len(s) == 1 for s in per_thread.values())
    assert len(set().union(*per_thread.values())) > 1
    round_robin = Cluster(requests, "flat", replace(CONFIG, routers=4))
    assert [round_robin.front(i, r) for i, r in enumerate(requests)] == [i % 4 for i in range(36)]


def test_echoed_tokens_bring_every_later_turn_to_the_node_of_the_previous_one() -> None:
    requests = conversations(6, 4)
    for echo in (True, False):
        # no table and the p2c tail: without echo nothing holds a conversation on one node
        config = replace(CONFIG, echo_tokens=echo, policy_params={"tail": "p2c"})
        cluster = Cluster(requests, "cacheroute_online", config)
        nodes: dict[int, list[int]] = {}
        for i, request in enumerate(requests):
            node = cluster.route(i, request, request.arrival_s)
            nodes.setdefault(request.thread, []).append(node)
        stays = [len(set(n)) == 1 for n in nodes.values()]
        if echo:  # the light load is within the bound: each conversation stays put
            assert all(stays)
        else:  # power-of-two choices each turn, so conversations wander
            assert not all(stays)


def test_the_session_is_what_the_policy_sees_when_echo_is_on() -> None:
    requests = conversations(3, 2)
    cluster = Cluster(requests, "cacheroute_online", CONFIG)
    seen: list[Request] = []
    policy = cluster.routers[0].policy
    choose = policy.choose

    def spy(request: Request, view: LoadView) -> object:
        seen.append(request)
        return choose(request, view)

    policy.choose = spy  # type: ignore[method-assign,assignment]
    for i, request in enumerate(requests):
        cluster.route(i, request, request.arrival_s)
    assert [r.session for r in seen[:3]] == [-1, -1, -1]
    assert all(r.session >= 0 for r in seen[3:])
    assert [r.flow for r in seen] == [r.thread for r in requests]


def test_tree_sync_delivers_each_routers_inserts_to_the_others_at_the_next_tick() -> None:
    requests = TinyWorkload(shared_blocks=8).requests(qps=20.0, duration_s=6, seed=5)
    cluster = Cluster(requests, "sglang", replace(CONFIG, routers=2, tree_sync_s=1.0))
    assert cluster.sync is not None
    first = requests[0]
    cluster.route(0, first, first.arrival_s)
    other = cluster.routers[1]
    assert isinstance(other.policy, PrefixHistoryPolicy)
    index = other.policy.index(other.view)
    assert not index.holders(first.blocks[-1])  # not before the tick
    cluster.sync.tick(first.arrival_s + 0.5)
    assert not index.holders(first.blocks[-1])
    cluster.sync.tick(first.arrival_s + 1.0)
    assert index.holders(first.blocks[-1])
    unsynced = Cluster(requests, "sglang", replace(CONFIG, routers=2))
    assert unsynced.sync is None
    assert Cluster(requests, "cacheroute", replace(CONFIG, routers=2, tree_sync_s=1.0)).sync is None


def test_synced_routers_learn_every_request_after_a_run() -> None:
    requests = TinyWorkload(shared_blocks=8).requests(qps=20.0, duration_s=10, seed=5)
    cluster = Cluster(requests, "sglang", replace(CONFIG, routers=2, tree_sync_s=0.5))
    cluster.run()
    late = requests[-1].arrival_s - 1.0
    for router in cluster.routers:
        assert isinstance(router.policy, PrefixHistoryPolicy)
        index = router.policy.index(router.view)
        for request in requests:
            if request.arrival_s < late:
                assert index.holders(request.blocks[-1])


def test_random_cache_miss_ties_differ_between_routers_and_index_ties_do_not() -> None:
    nodes = NodeSet([f"n{i}" for i in range(8)])
    view = LoadView(nodes)
    view.apply_snapshot(0.0, [0.0] * 8)
    picks = {SGLangPolicy(seed=s).choose(Request(1, (1, 2)), view).node for s in range(6)}
    assert picks == {0}
    random_picks = {
        SGLangPolicy(seed=s, tie_order="random").choose(Request(1, (1, 2)), view).node
        for s in range(6)
    }
    assert len(random_picks) > 1


def test_a_plan_run_with_sessions_is_deterministic() -> None:
    stream = make_stream(TinyWorkload(), qps=20.0, duration_s=10, seed=2, prior_window_s=10)
    table = plan_for("lpt", stream, CONFIG.node_ids(), q_cap=5.0)
    runs = [
        Cluster(stream.requests, "cacheroute_online", replace(CONFIG, routers=4), table).run()
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
