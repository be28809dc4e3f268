"""controlplane.lifecycle.live_guard: the rule (relative bound, absolute floor, sample minimum) and
the watch → judge → disable / roll back flow on the state twin, audited with the numbers."""

from __future__ import annotations

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from controlplane.core.ttft_window import Buckets, TtftWindows, WindowQuantile
from controlplane.lifecycle.live_guard import (
    AUTO_ACTOR,
    GUARD_ACTOR,
    GuardSettings,
    LiveGuard,
    judge,
)
from controlplane.lifecycle.pointer_moves import rollout
from controlplane.metrics import ControlPlaneMetrics
from tests.support.factories import store_plan

Phase = cluster_pb2.GuardState.Phase
BOUNDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
S = GuardSettings(window_s=10, settle_s=1, max_regression=0.5, floor_s=0.25, min_samples=20)


def q(value: float | None, samples: float) -> WindowQuantile:
    return WindowQuantile(value, samples, 1)


@pytest.mark.parametrize(
    ("before", "after", "phase"),
    [
        (q(0.2, 100), q(2.0, 100), Phase.PHASE_FIRED),
        (q(0.2, 100), q(0.29, 100), Phase.PHASE_PASSED),  # within x1.5
        (q(0.05, 100), q(0.2, 100), Phase.PHASE_PASSED),  # x4, but under the 0.25 s floor
        (q(2.0, 100), q(2.4, 100), Phase.PHASE_PASSED),  # +0.4 s, but within x1.5
        (q(0.2, 100), q(5.0, 10), Phase.PHASE_INCONCLUSIVE),  # too few after
        (q(None, 0), q(5.0, 100), Phase.PHASE_INCONCLUSIVE),
    ],
)
def test_the_guard_fires_only_past_both_bounds_with_enough_samples(
    before: WindowQuantile, after: WindowQuantile, phase: int
) -> None:
    assert judge(before, after, S).phase == phase


def feed(windows: TtftWindows, start_ms: int, end_ms: int, ttft_s: float, per_s: int) -> None:
    """Two nodes observing ``per_s`` requests a second each of about ``ttft_s``."""
    for node in ("a", "b"):
        window = windows._nodes.get(("default", node))
        total = window.last.total if window is not None and window.last is not None else 0.0
        cumulative = list(window.last.cumulative) if window and window.last else [0.0] * 6
        for at in range(start_ms, end_ms + 1, 1000):
            total += per_s
            pairs = zip(cumulative, BOUNDS, strict=True)
            cumulative = [c + (per_s if ttft_s <= b else 0) for c, b in pairs]
            windows.observe("default", node, at, Buckets(BOUNDS, tuple(cumulative), total))


async def rolled_out(stores: Stores, at_ms: int, actor: str) -> tuple[str, str]:
    old, new = await store_plan(stores, 1), await store_plan(stores, 2)
    await rollout(stores, "default", old, None, actor="alice", reason="")
    await rollout(stores, "default", new, None, actor=actor, reason="")
    return old, new


@pytest.mark.parametrize("action", ["disable", "rollback"])
async def test_a_regression_after_an_automatic_rollout_fires_and_is_audited(
    state_stores: Stores, action: str
) -> None:
    stores = state_stores
    await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="default", enabled=True))
    old, _ = await rolled_out(stores, 0, AUTO_ACTOR)
    active = await stores.plans.get_active("default")
    assert active is not None
    t0 = active.updated_at_unix_ms
    windows = TtftWindows()
    feed(windows, t0 - 10_000, t0, 0.08, 5)
    guard = LiveGuard(stores, windows, GuardSettings(**{**S.__dict__, "action": action}),
                      ControlPlaneMetrics())  # fmt: skip
    state = await guard.check("default", t0 + 500)
    assert state is not None and state.phase == Phase.PHASE_WATCHING
    assert state.before_samples >= 100 and state.before_p99_s <= 0.1 and state.from_version == old
    feed(windows, t0 + 1_000, t0 + 11_000, 2.0, 5)
    assert (await guard.check("default", t0 + 5_000)).phase == Phase.PHASE_WATCHING  # type: ignore[union-attr]
    state = await guard.check("default", t0 + 11_500)
    assert state is not None and state.phase == Phase.PHASE_FIRED and state.action == action
    assert state.after_p99_s > 1.0
    pointer = await stores.plans.get_active("default")
    assert pointer is not None and pointer.actor == GUARD_ACTOR
    assert pointer.version == ("" if action == "disable" else old)
    event = (await stores.plans.read_audit("default", 1))[-1]
    assert event.actor == GUARD_ACTOR and "regressed" in event.detail and "before" in event.detail
    mode = await stores.plans.get_auto_mode("default")
    assert mode is not None and not mode.enabled and mode.actor == GUARD_ACTOR
    assert (await stores.plans.get_guard("default")) == state


async def test_an_operators_rollout_is_not_watched_unless_every_rollout_is(
    state_stores: Stores,
) -> None:
    await rolled_out(state_stores, 0, "alice")
    guard = LiveGuard(state_stores, TtftWindows(), S, ControlPlaneMetrics())
    state = await guard.check("default", 10**13)
    assert state is not None and state.phase == Phase.PHASE_IDLE
    every = LiveGuard(
        state_stores, TtftWindows(), GuardSettings(all_rollouts=True), ControlPlaneMetrics()
    )
    watched = await every.check("default", 10**13)
    assert watched is not None and watched.phase == Phase.PHASE_WATCHING


async def test_a_quiet_window_is_inconclusive_and_changes_nothing(state_stores: Stores) -> None:
    await state_stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="default", enabled=True))
    _, new = await rolled_out(state_stores, 0, AUTO_ACTOR)
    guard = LiveGuard(state_stores, TtftWindows(), S, ControlPlaneMetrics())
    active = await state_stores.plans.get_active("default")
    assert active is not None
    await guard.check("default", active.updated_at_unix_ms)
    state = await guard.check("default", active.updated_at_unix_ms + 60_000)
    assert state is not None and state.phase == Phase.PHASE_INCONCLUSIVE
    still = await state_stores.plans.get_active("default")
    assert still is not None and still.version == new


async def test_a_stalled_fleet_is_waited_for_and_then_fires(state_stores: Stores) -> None:
    """No first tokens at the window's end (requests still queue): the after-window grows until
    the late ones arrive; with none at all by the longest window it is inconclusive."""
    stores = state_stores
    await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="default", enabled=True))
    await rolled_out(stores, 0, AUTO_ACTOR)
    active = await stores.plans.get_active("default")
    assert active is not None
    t0 = active.updated_at_unix_ms
    windows = TtftWindows()
    feed(windows, t0 - 10_000, t0, 0.08, 5)
    guard = LiveGuard(stores, windows, S, ControlPlaneMetrics())  # max_extend 2: up to 31 s
    await guard.check("default", t0 + 100)
    state = await guard.check("default", t0 + 11_500)  # the window passed with nothing in it
    assert state is not None and state.phase == Phase.PHASE_WATCHING
    feed(windows, t0 + 15_000, t0 + 18_000, 2.0, 5)  # the delayed first tokens, slow
    state = await guard.check("default", t0 + 18_500)
    assert state is not None and state.phase == Phase.PHASE_FIRED and state.after_samples >= 20


async def test_no_first_tokens_by_the_longest_window_is_inconclusive(state_stores: Stores) -> None:
    stores = state_stores
    await stores.plans.put_auto_mode(cluster_pb2.AutoMode(pool="default", enabled=True))
    await rolled_out(stores, 0, AUTO_ACTOR)
    active = await stores.plans.get_active("default")
    assert active is not None
    t0 = active.updated_at_unix_ms
    windows = TtftWindows()
    feed(windows, t0 - 10_000, t0, 0.08, 5)
    guard = LiveGuard(stores, windows, S, ControlPlaneMetrics())
    await guard.check("default", t0 + 100)
    state = await guard.check("default", t0 + 1_000 + 3 * 10_000 + 1)
    assert state is not None and state.phase == Phase.PHASE_INCONCLUSIVE
