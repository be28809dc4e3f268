"""Passive health's pure logic: streaks, growing ejections, the cap, the return on probation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cacheroute.v1 import cluster_pb2, routing_pb2
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.outliers import (
    Ejection,
    OutlierConfig,
    OutlierDetector,
    report_outcome,
    return_due,
)
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router

CONFIG = OutlierConfig(consecutive_failures=3, base_ejection_s=10.0, max_ejection_s=25.0)


def fail(
    detector: OutlierDetector, node: str, times: int, now: float, members: int = 4
) -> Ejection | None:
    result = None
    for _ in range(times):
        result = detector.failure(node, now, members)
    return result


def test_a_node_is_ejected_after_the_configured_consecutive_failures_only() -> None:
    detector = OutlierDetector(CONFIG)
    assert fail(detector, "a", 2, 0.0) is None
    ejection = detector.failure("a", 0.0, 4)
    assert ejection is not None and ejection.failures == 3 and ejection.duration_s == 10.0
    assert detector.ejected == {"a"}


def test_a_success_ends_the_streak() -> None:
    detector = OutlierDetector(CONFIG)
    fail(detector, "a", 2, 0.0)
    detector.success("a")
    assert fail(detector, "a", 2, 0.0) is None
    assert detector.ejected == frozenset()


def test_the_node_returns_by_itself_when_its_time_is_up() -> None:
    detector = OutlierDetector(CONFIG)
    fail(detector, "a", 3, 100.0)
    assert detector.expire(109.9) == []
    assert detector.expire(110.0) == ["a"]
    assert detector.ejected == frozenset()


def test_a_failure_on_probation_ejects_again_at_once_for_longer_up_to_the_max() -> None:
    detector = OutlierDetector(CONFIG)
    fail(detector, "a", 3, 0.0)
    detector.expire(10.0)
    second = detector.failure("a", 10.0, 4)  # the first attempt after the return fails
    assert second is not None and second.failures == 1 and second.duration_s == 20.0
    detector.expire(30.0)
    third = detector.failure("a", 30.0, 4)
    assert third is not None and third.duration_s == 25.0  # capped at max_ejection_s


def test_a_success_on_probation_clears_it_and_the_multiplier_decays_with_time_back() -> None:
    detector = OutlierDetector(CONFIG)
    fail(detector, "a", 3, 0.0)
    detector.expire(10.0)
    detector.success("a")
    assert detector.failure("a", 11.0, 4) is None  # a fresh streak is needed again
    # back for 25 s (two base periods) before the next ejection: the multiplier 1 decays to 0
    later = fail(detector, "a", 2, 35.0)
    assert later is not None and later.duration_s == 10.0


def test_failures_of_an_ejected_node_do_not_extend_its_ejection() -> None:
    detector = OutlierDetector(CONFIG)
    fail(detector, "a", 3, 0.0)
    assert fail(detector, "a", 10, 5.0) is None
    assert detector.ejected_until("a") == 10.0


def test_the_cap_bounds_the_ejected_share_and_never_ejects_the_last_node() -> None:
    detector = OutlierDetector(CONFIG)  # share 0.5 of 4 members: two
    assert fail(detector, "a", 3, 0.0) is not None
    assert fail(detector, "b", 3, 0.0) is not None
    assert fail(detector, "c", 3, 0.0) is None
    assert detector.ejected == {"a", "b"} and detector.overflows == 1
    lone = OutlierDetector(OutlierConfig(consecutive_failures=1, max_ejected_share=1.0))
    assert lone.failure("x", 0.0, 2) is not None
    assert lone.failure("y", 0.0, 2) is None  # the last undrained node stays
    single = OutlierDetector(OutlierConfig(consecutive_failures=1))
    assert single.failure("only", 0.0, 1) is None


def test_zero_consecutive_failures_turns_it_off() -> None:
    detector = OutlierDetector(OutlierConfig(consecutive_failures=0))
    assert fail(detector, "a", 100, 0.0) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consecutive_failures": -1},
        {"base_ejection_s": 0.0},
        {"base_ejection_s": 10.0, "max_ejection_s": 5.0},
        {"max_ejected_share": 1.5},
    ],
)
def test_bad_settings_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        OutlierConfig(**kwargs)  # type: ignore[arg-type]


def test_the_view_excludes_ejected_nodes_but_never_empties_the_pool() -> None:
    view = LoadView(NodeSet(["a", "b", "c"]), panic_threshold=0.5)
    view.set_ejected(frozenset({0}))
    assert list(view.eligible_nodes) == [1, 2] and not view.healthy[0]
    view.set_states(healthy=[True, False, False])  # panic: every undrained node, minus ejected
    assert view.panic and list(view.eligible_nodes) == [1, 2]
    view.set_states(healthy=[True, True, True], draining=[False, True, True])
    assert list(view.eligible_nodes) == [0]  # only the ejected one is left: ejection is ignored
    view.set_ejected(frozenset())
    assert list(view.eligible_nodes) == [0] and view.healthy[0]


def snapshot(ids: list[str], seq: int) -> cluster_pb2.LoadSnapshot:
    return cluster_pb2.LoadSnapshot(
        pool="default",
        leader_term=1,
        seq=seq,
        observed_at_unix_ms=1,
        nodes=[cluster_pb2.NodeLoad(node_id=n, healthy=True) for n in ids],
    )


def test_the_router_routes_around_an_ejected_node_and_back_after_its_return() -> None:
    router = Router(policy="flat", outliers=CONFIG, panic_threshold=0.0)
    router.apply_load(snapshot(["a", "b"], 1), now=1.0)
    state = router.pools["default"]
    for _ in range(3):
        report_outcome(state.outliers, state.view, "a", False, 0.0)
    inp = parse_request(routing_pb2.RouteRequest(key="k"))
    assert {router.route(inp, 2.0).node_id for _ in range(50)} == {"b"}
    # a membership change builds a new view: the ejection carries over by node id
    router.apply_load(snapshot(["a", "b", "c"], 2), now=3.0)
    assert {router.route(inp, 4.0).node_id for _ in range(50)} == {"b", "c"}
    assert return_due(state.outliers, state.view, 10.0) == ["a"]
    assert "a" in {router.route(inp, 11.0).node_id for _ in range(100)}


@settings(max_examples=300, deadline=None)
@given(
    members=st.integers(min_value=1, max_value=6),
    share=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    steps=st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.floats(0.0, 20.0)), max_size=200),
)
def test_ejections_never_pass_the_cap_nor_the_last_node_and_always_end(
    members: int, share: float, steps: list[tuple[int, bool, float]]
) -> None:
    config = OutlierConfig(consecutive_failures=2, base_ejection_s=5.0, max_ejection_s=12.0,
                           max_ejected_share=share)  # fmt: skip
    detector = OutlierDetector(config)
    cap = max(1, int(share * members))
    now = 0.0
    for node, ok, dt in steps:
        now += dt
        detector.expire(now)
        node_id = f"n{node % members}"
        if ok:
            detector.success(node_id)
        else:
            ejection = detector.failure(node_id, now, members)
            if ejection is not None:
                assert ejection.duration_s <= config.max_ejection_s
        assert len(detector.ejected) <= min(cap, members - 1)
        for ejected in detector.ejected:
            until = detector.ejected_until(ejected)
            assert until is not None and until <= now + config.max_ejection_s
    detector.expire(now + config.max_ejection_s)
    assert detector.ejected == frozenset()
