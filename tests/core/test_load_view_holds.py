"""Completion-aware load: held decisions count until released; load = snapshot + sent − released."""

from __future__ import annotations

from dataplane.core.load_view import LoadView, NodeSet


def _view(horizon: float = 5.0) -> LoadView:
    view = LoadView(NodeSet(["a", "b"]), correction_horizon_s=horizon)
    view.apply_snapshot(10.0, [2.0, 0.0])
    return view


def test_a_held_decision_counts_past_the_horizon_until_released() -> None:
    view = _view(horizon=5.0)
    view.record(0, 11.0)
    token = view.hold_last(0, 11.0)
    assert view.loads == [3.0, 0.0]
    view.record(1, 30.0)  # 19 s later: a plain decision would have decayed by now
    assert view.loads == [3.0, 1.0]
    assert view.held(0) == 1
    assert view.release(token, 31.0)
    assert view.loads == [2.0, 1.0]
    assert view.held(0) == 0


def test_releasing_twice_is_refused_and_changes_nothing() -> None:
    view = _view()
    view.record(1, 11.0)
    token = view.hold_last(1, 11.0)
    assert view.release(token, 12.0)
    assert not view.release(token, 12.5)
    assert view.loads == [2.0, 0.0]


def test_a_snapshot_after_dispatch_counts_the_request_once() -> None:
    view = _view()
    view.record(1, 11.0)
    token = view.hold_last(1, 11.0)
    view.apply_snapshot(12.0, [2.0, 1.0])  # the engine now reports it running
    assert view.loads == [2.0, 1.0]
    assert view.release(token, 13.0)  # ended after that snapshot: subtract until one covers it
    assert view.loads == [2.0, 0.0]
    view.apply_snapshot(12.5, [2.0, 1.0])  # observed before the release: still counts it
    assert view.loads == [2.0, 0.0]
    view.apply_snapshot(14.0, [2.0, 0.0])  # observed after: the release is in the snapshot
    assert view.loads == [2.0, 0.0]


def test_a_release_correction_expires_after_the_horizon_without_snapshots() -> None:
    view = _view(horizon=5.0)
    view.record(0, 11.0)
    token = view.hold_last(0, 11.0)
    view.apply_snapshot(12.0, [3.0, 0.0])  # covers the held request
    view.release(token, 13.0)
    assert view.loads == [2.0, 0.0]
    view.record(1, 25.0)  # far past the horizon: the stale release stops counting
    assert view.loads == [3.0, 1.0]


def test_unheld_decisions_keep_decaying() -> None:
    view = _view(horizon=5.0)
    view.record(0, 11.0)
    view.record(1, 17.0)
    assert view.loads == [2.0, 1.0]
