"""The Router domain object: pools, load snapshots and membership, table swaps, decisions."""

from __future__ import annotations

import pytest

from dataplane.core.keys import hash_key
from dataplane.core.policies import Reason
from dataplane.core.router import NoDestinationError, Router, UnknownPoolError
from dataplane.telemetry.sampler import Sampler
from tests.support.router_core import NOW_MS, NOW_S, inp, snapshot, table_for


def test_default_is_known_from_the_start_and_has_no_destinations_yet() -> None:
    router = Router()
    with pytest.raises(NoDestinationError, match="'default' has no destinations yet"):
        router.route(inp("k"), NOW_S)


def test_an_unknown_pool_is_not_found() -> None:
    with pytest.raises(UnknownPoolError, match="'blue' is not known"):
        Router().route(inp("k", pool="blue"), NOW_S)


def test_without_a_table_requests_go_by_power_of_two_choices() -> None:
    router = Router()
    router.apply_load(snapshot([("a", 0.0), ("b", 9.0)]))
    outcome = router.route(inp("k"), NOW_S)
    assert (outcome.node_id, outcome.address, outcome.reason) == (
        "a",
        "a.svc:8000",
        Reason.NO_TABLE,
    )
    assert (outcome.version, outcome.generation) == ("", 0)


def test_a_warm_key_goes_to_the_least_loaded_member_of_its_set() -> None:
    router = Router()
    router.apply_load(snapshot([("a", 5.0), ("b", 1.0), ("c", 0.0)]))
    table = table_for({"hot": ["a", "b"]}, ["a", "b", "c"])
    router.install_table("default", table, 7)
    outcome = router.route(inp("hot"), NOW_S)
    assert (outcome.node_id, outcome.reason) == ("b", Reason.WARM)
    assert (outcome.version, outcome.generation) == (table.version, 7)


def test_a_newer_snapshot_changes_the_choice() -> None:
    router = Router()
    router.install_table("default", table_for({"hot": ["a", "b"]}, ["a", "b"]), 1)
    router.apply_load(snapshot([("a", 0.0), ("b", 10.0)], seq=1))
    assert router.route(inp("hot"), NOW_S).node_id == "a"
    router.apply_load(snapshot([("a", 10.0), ("b", 0.0)], seq=2, at_ms=NOW_MS + 500))
    assert router.route(inp("hot"), NOW_S + 0.5).node_id == "b"


def test_an_older_or_repeated_snapshot_is_ignored() -> None:
    router = Router()
    assert router.apply_load(snapshot([("a", 0.0), ("b", 10.0)], seq=5, at_ms=NOW_MS))
    assert not router.apply_load(snapshot([("a", 10.0), ("b", 0.0)], seq=4, at_ms=NOW_MS - 1))
    assert not router.apply_load(snapshot([("a", 10.0), ("b", 0.0)], seq=5, at_ms=NOW_MS))
    assert router.pools["default"].view.loads == [0.0, 10.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0], ids=["nan", "inf", "negative"])
def test_a_snapshot_with_a_load_that_is_not_a_finite_count_is_refused_whole(bad: float) -> None:
    # A NaN load compares false both ways, so the node would win every tie rotation it starts.
    router = Router()
    router.install_table("default", table_for({"hot": ["a", "b"]}, ["a", "b"]), 1)
    assert router.apply_load(snapshot([("a", 3.0), ("b", 1.0)], seq=1))
    with pytest.raises(ValueError, match=r"node 'a' has load .*; loads are finite, >= 0"):
        router.apply_load(snapshot([("a", bad), ("b", 9.0)], seq=2, at_ms=NOW_MS + 1))
    assert router.pools["default"].view.loads == [3.0, 1.0]  # the last good snapshot stays
    assert router.apply_load(snapshot([("a", 0.0), ("b", 9.0)], seq=2, at_ms=NOW_MS + 1))


def test_drained_and_unhealthy_members_are_not_chosen() -> None:
    router = Router()
    router.install_table("default", table_for({"hot": ["a", "b", "c"]}, ["a", "b", "c"]), 1)
    router.apply_load(snapshot([("a", 0.0, True, True), ("b", 0.0, False, False), ("c", 50.0)]))
    chosen = {router.route(inp("hot"), NOW_S).node_id for _ in range(20)}
    assert chosen == {"c"}
    tail = {router.route(inp(f"tail-{i}"), NOW_S).node_id for i in range(20)}
    assert tail == {"c"}


def test_all_members_ineligible_falls_back_to_power_of_two_choices() -> None:
    router = Router()
    router.install_table("default", table_for({"hot": ["a"]}, ["a", "b"]), 1)
    router.apply_load(snapshot([("a", 0.0, False, False), ("b", 3.0)]))
    outcome = router.route(inp("hot"), NOW_S)
    assert (outcome.node_id, outcome.reason) == ("b", Reason.FALLBACK_UNHEALTHY)


def test_no_eligible_node_is_unavailable_without_a_panic_threshold() -> None:
    router = Router(panic_threshold=0.0)
    router.apply_load(snapshot([("a", 0.0, False, False), ("b", 0.0, True, True)]))
    with pytest.raises(NoDestinationError, match="no healthy, undrained destination"):
        router.route(inp("k"), NOW_S)


def test_below_the_panic_threshold_the_router_routes_over_every_undrained_node() -> None:
    router = Router()  # default threshold: half of the undrained nodes
    router.install_table("default", table_for({"hot": ["a"]}, ["a", "b", "c"]), 1)
    router.apply_load(
        snapshot([("a", 0.0, False, False), ("b", 0.0, False, False), ("c", 0.0, True, True)])
    )
    assert router.pools["default"].view.panic
    assert router.route(inp("hot"), NOW_S).node_id == "a"  # the warm member again, not an error
    tail = {router.route(inp(f"t{i}"), NOW_S).node_id for i in range(40)}
    assert tail == {"a", "b"}  # the drained node stays out


def test_snapshots_are_ordered_by_leader_term_then_seq_not_wall_time() -> None:
    router = Router()
    first = snapshot([("a", 0.0), ("b", 10.0)], seq=900, at_ms=NOW_MS)
    first.leader_term = 1
    assert router.apply_load(first, now=NOW_S)
    forged = snapshot([("a", 99.0), ("b", 0.0)], seq=901, at_ms=NOW_MS + 30_000)  # 30 s ahead
    forged.leader_term = 1
    assert router.apply_load(forged, now=NOW_S)
    assert router.pools["default"].view.snapshot_observed_at == NOW_S  # capped at now
    honest = snapshot([("a", 0.0), ("b", 10.0)], seq=902, at_ms=NOW_MS + 200)
    honest.leader_term = 1
    assert router.apply_load(honest, now=NOW_S + 0.25)  # not frozen by the forged date
    assert router.pools["default"].view.loads == [0.0, 10.0]
    newer_term = snapshot([("a", 1.0), ("b", 1.0)], seq=1, at_ms=NOW_MS - 5_000)
    newer_term.leader_term = 2
    assert router.apply_load(newer_term, now=NOW_S + 0.5)  # a new leader restarts seq
    stale = snapshot([("a", 9.0), ("b", 9.0)], seq=903, at_ms=NOW_MS + 900)
    stale.leader_term = 1
    assert not router.apply_load(stale, now=NOW_S + 0.6)  # the deposed leader's order


def test_a_lower_order_is_followed_once_the_held_snapshot_is_too_old() -> None:
    router = Router(load_max_age_s=3.0)
    held = snapshot([("a", 0.0), ("b", 10.0)], seq=50)
    held.leader_term = 7
    assert router.apply_load(held, now=NOW_S)
    lost = snapshot([("a", 10.0), ("b", 0.0)], seq=1)  # Redis came back empty: term 1 again
    lost.leader_term = 1
    assert not router.apply_load(lost, now=NOW_S + 1.0)
    assert not router.apply_load(held, now=NOW_S + 9.0)  # the same snapshot is never re-applied
    assert router.apply_load(lost, now=NOW_S + 3.5)
    assert router.pools["default"].view.loads == [10.0, 0.0]


def test_old_snapshots_age_into_in_flight_counts_only() -> None:
    router = Router(load_max_age_s=3.0)
    router.apply_load(snapshot([("a", 0.0), ("b", 50.0)]), now=NOW_S)
    assert router.age_loads(NOW_S + 2.0) == []
    router.route(inp("k1"), NOW_S + 2.0)  # goes to a (b looks busy)
    assert router.age_loads(NOW_S + 3.5) == ["default"]
    assert router.pools["default"].view.loads == [1.0, 0.0]  # b's 50 is unknown now
    assert router.age_loads(NOW_S + 4.0) == []  # once per episode
    fresh = snapshot([("a", 2.0), ("b", 3.0)], seq=2)
    assert router.apply_load(fresh, now=NOW_S + 5.0)
    assert not router.pools["default"].load_aged


def test_a_node_whose_report_was_too_old_when_published_has_unknown_load() -> None:
    router = Router(load_max_age_s=3.0)
    entries = snapshot([("a", 40.0), ("b", 5.0)])
    entries.nodes[0].age_ms = 4_000
    router.apply_load(entries, now=NOW_S)
    assert router.pools["default"].view.loads == [0.0, 5.0]


def test_a_membership_change_builds_a_new_view_and_rebinds_the_table() -> None:
    router = Router()
    router.install_table("default", table_for({"hot": ["b", "c"]}, ["a", "b", "c"]), 1)
    router.apply_load(snapshot([("a", 0.0), ("b", 5.0)], seq=1))
    first = router.pools["default"].view
    assert router.route(inp("hot"), NOW_S).node_id == "b"  # c is not a member yet
    router.apply_load(snapshot([("a", 0.0), ("b", 5.0), ("c", 0.0)], seq=2, at_ms=NOW_MS + 1))
    second = router.pools["default"].view
    assert second is not first
    assert second.nodes.ids == ("a", "b", "c")
    assert router.route(inp("hot"), NOW_S + 0.01).node_id == "c"


def test_the_same_membership_keeps_the_view_and_its_in_flight_correction() -> None:
    router = Router()
    router.apply_load(snapshot([("a", 0.0), ("b", 0.0)], seq=1))
    view = router.pools["default"].view
    router.route(inp("k"), NOW_S + 1.0)  # decided after the next snapshot's observation time
    router.apply_load(snapshot([("a", 0.0), ("b", 0.0)], seq=2, at_ms=NOW_MS + 500))
    assert router.pools["default"].view is view
    assert sum(view.loads) == 1.0


def test_a_swap_returns_the_previous_table_and_later_decisions_use_the_new_one() -> None:
    router = Router()
    router.apply_load(snapshot([("a", 0.0), ("b", 0.0)]))
    old = table_for({"hot": ["a"]}, ["a", "b"])
    new = table_for({"hot": ["b"]}, ["a", "b"])
    assert router.install_table("default", old, 1) is None
    assert router.route(inp("hot"), NOW_S).node_id == "a"
    assert router.install_table("default", new, 2) is old
    outcome = router.route(inp("hot"), NOW_S)
    assert (outcome.node_id, outcome.version, outcome.generation) == ("b", new.version, 2)


def test_a_batch_checks_every_pool_before_routing_any() -> None:
    router = Router()
    router.apply_load(snapshot([("a", 0.0)]))
    router.add_pool("empty")
    with pytest.raises(NoDestinationError, match=r"requests\[1\]: pool 'empty' has no dest"):
        router.route_batch([inp("k1"), inp("k2", pool="empty")], NOW_S)
    with pytest.raises(UnknownPoolError, match=r"requests\[2\]: pool 'nope'"):
        router.route_batch([inp("k1"), inp("k2"), inp("k3", pool="nope")], NOW_S)
    assert router.pools["default"].view.loads == [0.0]  # nothing was routed
    assert [o.node_id for o in router.route_batch([inp("x"), inp("y")], NOW_S)] == ["a", "a"]


def test_history_policies_get_prefix_blocks_and_the_others_do_not() -> None:
    assert Router(policy="preble").pools["default"].uses_blocks
    assert Router(policy="sglang").pools["default"].uses_blocks
    assert not Router(policy="cacheroute").pools["default"].uses_blocks
    assert not Router(policy="flat").pools["default"].uses_blocks


def test_only_policies_that_declare_it_get_prefix_blocks() -> None:
    from dataplane.core.policies import POLICIES  # noqa: PLC0415

    needing = {name for name in POLICIES if Router(policy=name).pools["default"].uses_blocks}
    # dualmap learns from decisions, not from prefixes
    assert needing == {"preble", "sglang", "smg", "smg_events"}


def test_a_decision_names_the_current_address_and_version_after_changes() -> None:
    router = Router(policy="cacheroute")
    router.apply_load(snapshot([("a", 0.0)], seq=1))
    assert router.route(inp("k"), NOW_S).address == "a.svc:8000"
    moved = snapshot([("a", 0.0)], seq=2)
    moved.nodes[0].address = "a.elsewhere:9000"
    router.apply_load(moved)
    assert router.route(inp("k"), NOW_S).address == "a.elsewhere:9000"
    table = table_for({"k": ["a"]}, ["a"])
    router.install_table("default", table, 7)
    outcome = router.route(inp("k"), NOW_S)
    assert (outcome.version, outcome.generation, outcome.reason) == (table.version, 7, Reason.WARM)
    assert outcome.address == "a.elsewhere:9000"


def test_every_registered_policy_routes_through_the_router() -> None:
    from dataplane.core.policies import POLICIES  # noqa: PLC0415

    for name in POLICIES:
        router = Router(policy=name, seed=3)
        router.apply_load(snapshot([("a", 1.0), ("b", 0.0)]))
        router.install_table("default", table_for({"hot": ["a"]}, ["a", "b"]), 1)
        outcome = router.route(inp("hot", prompt_prefix="hello " * 40), NOW_S)
        assert outcome.node_id in ("a", "b"), name


def test_an_unknown_policy_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        Router(policy="nope")


def test_decisions_are_counted_per_pool_and_sampled() -> None:
    sampler = Sampler(1.0, router_id="r1")
    router = Router(sampler=sampler)
    router.apply_load(snapshot([("a", 0.0)]))
    for key in ("x", "y", "x"):
        router.route(inp(key, request_id="q"), NOW_S)
    traffic = router.pools["default"].traffic
    report = traffic.drain("r1", "default", NOW_MS)
    assert report is not None
    assert report.total_requests == 3
    assert [(k.key, k.count) for k in report.top_keys] == [("x", 2), ("y", 1)]
    samples = sampler.drain()
    assert [(s.key, s.node_id, s.reason, s.router_id) for s in samples] == [
        ("x", "a", "no_table", "r1"),
        ("y", "a", "no_table", "r1"),
        ("x", "a", "no_table", "r1"),
    ]


def test_the_bound_table_memo_returns_copies_and_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataplane.core.load_view as router_module  # noqa: PLC0415

    monkeypatch.setattr(router_module, "MEMO_LIMIT", 3)
    table = table_for({"hot": ["a", "b"], "warm": ["b"]}, ["a", "b"])
    bound = router_module.bind_with_memo(table, router_module.NodeSet(["b", "a"]))
    assert bound is not None
    first = bound.destinations(hash_key("hot"))
    assert first == [1, 0]  # NodeSet indices of a and b
    assert first is not None
    first.append(99)  # a caller mutating its list does not change the memo
    assert bound.destinations(hash_key("hot")) == [1, 0]
    assert bound.destinations(hash_key("cold")) is None
    assert bound.destinations(hash_key("cold")) is None
    for key in ("x", "y", "z", "warm"):
        bound.destinations(hash_key(key))
    assert len(bound.memo) <= 3
    assert bound.destinations(hash_key("warm")) == [0]


def test_the_route_requests_opening_flag_reaches_the_default_policy() -> None:
    """``opening_turn`` tightens the member's bound; unset, a turn keeps its member (issue 30)."""
    ids = [f"n{i:02d}" for i in range(12)]
    table = table_for({"hot": ids[:4]}, ids)

    def fresh(loads: dict[str, float]) -> Router:
        router = Router(policy="cacheroute_balanced")
        router.apply_load(snapshot([(n, loads.get(n, 10.0)) for n in ids]))
        router.install_table("default", table, 1)
        return router

    home = fresh({}).route(inp("hot", session_id="conv-1"), NOW_S).node_id
    busy = {home: 14.0}  # 14 + 1 > ceil(1.25 x 125 / 12) = 14; within ceil(1.75 x 125 / 12) = 19
    later = fresh(busy).route(inp("hot", session_id="conv-1"), NOW_S)
    opening = fresh(busy).route(inp("hot", session_id="conv-1", opening_turn=True), NOW_S)
    assert later.node_id == home
    assert opening.node_id != home and opening.node_id in ids[:4]
