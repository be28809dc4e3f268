"""Active probes' pure logic: when a pool is probed, streaks, eject/restore, the shared cap."""

from __future__ import annotations

import pytest

from cacheroute.v1 import cluster_pb2, routing_pb2
from dataplane.core.active_probes import (
    ActiveProbes,
    ProbeChange,
    ProbeConfig,
    report_round,
    reset_probes,
    should_probe,
)
from dataplane.core.outliers import OutlierConfig, report_outcome
from dataplane.core.route_input import parse_request
from dataplane.core.router import Router

CONFIG = ProbeConfig(interval_s=2.0, after_stale_s=10.0, failures=3, timeout_s=1.0)


def test_a_pool_is_probed_only_while_its_snapshot_is_older_than_the_bound() -> None:
    assert not should_probe(CONFIG, 10.0)
    assert should_probe(CONFIG, 10.01)
    assert not should_probe(CONFIG, None)  # never had a snapshot: no membership to probe
    assert not should_probe(ProbeConfig(interval_s=0), 1e9)  # off


@pytest.mark.parametrize(
    "fields", [{"interval_s": -1}, {"after_stale_s": -1}, {"failures": 0}, {"timeout_s": 0}]
)
def test_bad_settings_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ProbeConfig(**fields)  # type: ignore[arg-type]


def test_k_consecutive_failures_eject_and_one_success_restores() -> None:
    probes = ActiveProbes(CONFIG)
    assert probes.record("a", False, 4) is None
    assert probes.record("a", False, 4) is None
    assert probes.record("a", False, 4) == ProbeChange("a", True, 3)
    assert probes.ejected == {"a"}
    assert probes.record("a", False, 4) is None  # already ejected: no second change
    assert probes.record("a", True, 4) == ProbeChange("a", False, 0)
    assert probes.ejected == frozenset()
    assert probes.record("a", False, 4) is None  # the streak started over


def test_a_success_ends_the_streak_before_an_ejection() -> None:
    probes = ActiveProbes(CONFIG)
    probes.record("a", False, 4)
    probes.record("a", False, 4)
    assert probes.record("a", True, 4) is None
    assert probes.record("a", False, 4) is None and probes.ejected == frozenset()


def test_the_cap_counts_passive_ejections_and_never_takes_the_last_node() -> None:
    probes = ActiveProbes(CONFIG, max_ejected_share=0.5)
    for _ in range(3):
        assert probes.record("a", False, 2, others=frozenset({"b"})) is None  # cap 1, b is out
    assert probes.overflows == 1
    assert probes.record("a", False, 2) == ProbeChange("a", True, 4)  # room again: ejected
    for _ in range(3):
        assert probes.record("b", False, 2) is None  # the last node is never ejected
    assert probes.ejected == {"a"}


def test_reset_and_keep_only_forget_streaks_and_ejections() -> None:
    probes = ActiveProbes(CONFIG)
    for _ in range(3):
        probes.record("a", False, 4)
    probes.record("b", False, 4)
    probes.keep_only({"b"})
    assert probes.ejected == frozenset()
    probes.record("b", False, 4)
    assert probes.reset() == []
    probes.record("b", False, 4)
    probes.record("b", False, 4)
    assert probes.ejected == frozenset()  # the streak before reset was forgotten


def snapshot(ids: list[str], seq: int) -> cluster_pb2.LoadSnapshot:
    return cluster_pb2.LoadSnapshot(
        pool="default",
        seq=seq,
        observed_at_unix_ms=1_000,
        nodes=[cluster_pb2.NodeLoad(node_id=n, address=f"{n}:1", healthy=True) for n in ids],
    )


def flat_router() -> Router:
    router = Router(
        policy="flat",
        outliers=OutlierConfig(consecutive_failures=1, max_ejected_share=1.0),
        probes=CONFIG,
        panic_threshold=0.0,
    )
    router.apply_load(snapshot(["a", "b", "c"], 1), now=1.0)
    return router


def test_the_router_routes_around_a_probe_ejection_next_to_passive_health() -> None:
    router = flat_router()
    state = router.pools["default"]
    inp = parse_request(routing_pb2.RouteRequest(key="k"))
    a_down = {"a": False, "b": True, "c": True}
    rounds = [report_round(state.probes, state.outliers, state.view, a_down) for _ in range(3)]
    assert rounds == [[], [], [ProbeChange("a", True, 3)]]
    assert {router.route(inp, 2.0).node_id for _ in range(60)} == {"b", "c"}
    report_outcome(state.outliers, state.view, "b", False, 2.0)  # passive health ejects b too
    assert {router.route(inp, 2.0).node_id for _ in range(30)} == {"c"}
    # a membership change builds a new view: the probe ejection carries over by node id
    router.apply_load(snapshot(["a", "b", "c", "d"], 2), now=3.0)
    assert {router.route(inp, 4.0).node_id for _ in range(60)} == {"c", "d"}
    back = report_round(state.probes, state.outliers, state.view, {"a": True, "gone": False})
    assert back == [ProbeChange("a", False, 0)]  # a node that left the pool is not judged
    assert "a" in {router.route(inp, 4.0).node_id for _ in range(100)}
    for _ in range(3):
        report_round(state.probes, state.outliers, state.view, {"d": False, "c": True})
    assert reset_probes(state.probes, state.outliers, state.view) == ["d"]
    assert "d" in {router.route(inp, 4.0).node_id for _ in range(100)}


def test_a_round_in_which_no_destination_answers_ejects_nothing() -> None:
    """The router's own network is then the likelier fault than every engine at once."""
    router = flat_router()
    state = router.pools["default"]
    for _ in range(5):
        all_down = dict.fromkeys("abc", False)
        assert report_round(state.probes, state.outliers, state.view, all_down) == []
    assert state.probes.ejected == frozenset()
    # ... and those rounds start no streak: two failures next to a success do not eject yet
    for _ in range(2):
        report_round(state.probes, state.outliers, state.view, {"a": False, "b": True})
    assert state.probes.ejected == frozenset()
