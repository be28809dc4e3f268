"""The live guard: after a rollout, compare the pool's p99 TTFT after it with before it.

The agents report each engine's TTFT histogram; :mod:`controlplane.core.ttft_window` turns them into
the pool's p99 over any recent window. For a watched rollout at time T (automatic mode's, or
every rollout with ``--guard-all-rollouts``) the guard compares

* before = p99 over ``[T − window, T]`` and
* after  = p99 over ``[T + settle, T + settle + window]`` (``settle``: routers install the table),

once the after-window has passed, with :func:`judge`. A fleet that slows down a lot reports
*fewer* first tokens (requests still queue), so when the before-window had enough samples and
the after-window has not, the after-window grows (up to ``max_extend`` more windows, judged
over ``[T + settle, now]``) until the delayed first tokens arrive.

It **fires** only when both windows hold at least ``min_samples`` observations,
``after > before × (1 + max_regression)`` *and* ``after − before > floor_s`` (a relative
bound, an absolute floor, a sample minimum: noise at low latency or low traffic does not fire
it). Firing disables the plan (the routers fall back to
Flat-LB) or rolls back to the version active before (``--guard-action``; the rollback passes the
rollout gates like any other, and when they refuse the guard disables instead), as the actor
``live-guard``, with the numbers in the pointer move's audit detail; it also turns the pool's
automatic mode off (an operator re-enables it), so a bad estimate cannot roll out again at once.
A pointer moved by anyone else during the watch ends it ("superseded"). The state is one record
per pool (``GuardState``), shown by ``cachectl status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from cacheroute_state.interfaces import ConflictError
from controlplane.core.ttft_window import TtftWindows, WindowQuantile
from controlplane.errors import PreconditionError
from controlplane.lifecycle.pointer_moves import disable, rollback
from controlplane.lifecycle.rollout_gates import ActivationRefusedError, RolloutGate
from controlplane.metrics import ControlPlaneMetrics

log = structlog.get_logger("controlplane.guard")
GUARD_ACTOR = "live-guard"
AUTO_ACTOR = "automatic-mode"
Phase = cluster_pb2.GuardState.Phase
QUANTILE = 0.99


@dataclass(frozen=True)
class GuardSettings:
    window_s: float = 60.0
    settle_s: float = 5.0
    max_regression: float = 0.5
    floor_s: float = 0.25
    min_samples: int = 50
    action: str = "disable"  # or "rollback"
    all_rollouts: bool = False
    # Extra windows the after-window may grow by while it has too few samples (module doc).
    max_extend: int = 2


@dataclass(frozen=True)
class Judgement:
    phase: Phase.ValueType
    detail: str


def judge(before: WindowQuantile, after: WindowQuantile, s: GuardSettings) -> Judgement:
    """PASSED, FIRED or INCONCLUSIVE for one before/after pair (module docstring)."""
    if (
        before.value_s is None
        or after.value_s is None
        or min(before.samples, after.samples) < s.min_samples
    ):
        return Judgement(
            Phase.PHASE_INCONCLUSIVE,
            f"too few TTFT samples to judge ({before.samples:.0f} before, {after.samples:.0f} "
            f"after; {s.min_samples} needed in each)",
        )
    b, a = before.value_s, after.value_s
    numbers = (
        f"p99 TTFT {b:.3f} s before -> {a:.3f} s after ({before.samples:.0f} / "
        f"{after.samples:.0f} samples; bound x{1 + s.max_regression:.2f} and +{s.floor_s:.3f} s)"
    )
    if a > b * (1 + s.max_regression) and a - b > s.floor_s:
        return Judgement(Phase.PHASE_FIRED, "regressed: " + numbers)
    return Judgement(Phase.PHASE_PASSED, "within bounds: " + numbers)


class LiveGuard:
    """The leader's guard loop body: :meth:`tick` once a second."""

    def __init__(
        self,
        stores: Stores,
        windows: TtftWindows,
        settings: GuardSettings,
        metrics: ControlPlaneMetrics,
        *,
        gates: Sequence[RolloutGate] = (),
    ) -> None:
        self._gates = list(gates)
        self._stores = stores
        self._windows = windows
        self.settings = settings
        self._metrics = metrics

    def _window_ms(self) -> int:
        return round(self.settings.window_s * 1000)

    def pool_p99(self, pool: str, now_ms: int) -> WindowQuantile:
        return self._windows.quantile(pool, QUANTILE, now_ms - self._window_ms(), now_ms)

    async def tick(self, now_ms: int) -> None:
        for pool in await self._stores.plans.pools():
            current = self.pool_p99(pool, now_ms)
            if current.value_s is not None:
                self._metrics.pool_ttft_p99.labels(pool).set(current.value_s)
            self._metrics.pool_ttft_samples.labels(pool).set(current.samples)
            await self.check(pool, now_ms)

    async def _watched(self, pointer: cluster_pb2.ActivePointer, pool: str) -> bool:
        if pointer.action != "rollout" or not pointer.version:
            return False
        if self.settings.all_rollouts:
            return True
        mode = await self._stores.plans.get_auto_mode(pool)
        return pointer.actor == AUTO_ACTOR and mode is not None and mode.enabled

    async def check(self, pool: str, now_ms: int) -> cluster_pb2.GuardState | None:
        """Start watching a new rollout, or judge the one watched once its window passed."""
        stores = self._stores
        active = await stores.plans.get_active(pool)
        state = await stores.plans.get_guard(pool) or cluster_pb2.GuardState(pool=pool)
        if active is None:
            return state
        if active.generation != state.generation and state.phase == Phase.PHASE_WATCHING:
            state.phase = Phase.PHASE_IDLE
            state.detail = f"superseded by generation {active.generation} ({active.action})"
            state.decided_at_unix_ms = now_ms
            await stores.plans.put_guard(state)
            log.info("guard superseded", pool=pool, version=state.version)
        if active.generation != state.generation and await self._watched(active, pool):
            return await self._watch(pool, active, now_ms)
        if state.phase != Phase.PHASE_WATCHING:
            return state
        at = state.rolled_out_at_unix_ms
        start = at + round(self.settings.settle_s * 1000)
        if now_ms < start + self._window_ms():
            return state
        after = self._windows.quantile(pool, QUANTILE, start, now_ms)
        few = after.samples < self.settings.min_samples <= state.before_samples
        longest = start + self._window_ms() * (1 + self.settings.max_extend)
        if few and now_ms < longest:
            return state  # a stalled fleet reports no first tokens yet: wait for them
        before = WindowQuantile(
            state.before_p99_s if state.before_samples else None, state.before_samples, 0
        )
        verdict = judge(before, after, self.settings)
        state.after_p99_s = after.value_s or 0.0
        state.after_samples = after.samples
        state.phase = verdict.phase
        state.detail = verdict.detail
        state.decided_at_unix_ms = now_ms
        self._metrics.guard_decisions.labels(pool, Phase.Name(verdict.phase)).inc()
        if verdict.phase == Phase.PHASE_FIRED:
            await self._fire(pool, state)
        await stores.plans.put_guard(state)
        log.info(
            "guard decided", pool=pool, version=state.version, phase=Phase.Name(state.phase),
            before_p99_s=state.before_p99_s, after_p99_s=state.after_p99_s,
            before_samples=state.before_samples, after_samples=state.after_samples,
            action=state.action or None, detail=state.detail,
        )  # fmt: skip
        return state

    async def _watch(
        self, pool: str, active: cluster_pb2.ActivePointer, now_ms: int
    ) -> cluster_pb2.GuardState:
        at = active.updated_at_unix_ms or now_ms
        before = self._windows.quantile(pool, QUANTILE, at - self._window_ms(), at)
        events = await self._stores.plans.read_audit(pool, 50)
        moves = [e for e in events if e.generation == active.generation and e.action == "rollout"]
        state = cluster_pb2.GuardState(
            pool=pool, phase=Phase.PHASE_WATCHING, version=active.version,
            generation=active.generation, rolled_out_at_unix_ms=at,
            before_p99_s=before.value_s or 0.0, before_samples=before.samples,
            from_version=moves[-1].from_version if moves else "",
            detail=f"watching {active.version} (rolled out by {active.actor})",
        )  # fmt: skip
        await self._stores.plans.put_guard(state)
        log.info(
            "guard watching", pool=pool, version=active.version, generation=active.generation,
            before_p99_s=before.value_s, before_samples=before.samples,
        )  # fmt: skip
        return state

    async def _fire(self, pool: str, state: cluster_pb2.GuardState) -> None:
        """Disable or roll back (audited with the numbers), and turn automatic mode off."""
        reason = f"live guard fired on {state.version}: {state.detail}"
        action = self.settings.action
        try:
            moved: cluster_pb2.ActivePointer | None = None
            if action == "rollback" and state.from_version:
                try:
                    moved = await rollback(
                        self._stores, pool, state.from_version, state.generation,
                        actor=GUARD_ACTOR, reason=reason, gates=self._gates,
                        now_ms=state.decided_at_unix_ms,
                    )  # fmt: skip
                except ActivationRefusedError as exc:  # the gates said no: Flat-LB is safe
                    reason += f"; rollback to {state.from_version} refused, disabled instead: {exc}"
            if moved is None:
                action = "disable"
                moved = await disable(
                    self._stores, pool, state.generation, actor=GUARD_ACTOR, reason=reason
                )
        except (PreconditionError, ConflictError) as exc:  # the pointer moved meanwhile
            state.detail += f"; could not {action}: {exc}"
            return
        state.action = action
        state.generation = moved.generation
        mode = await self._stores.plans.get_auto_mode(pool)
        if mode is not None and mode.enabled:
            mode.enabled = False
            mode.actor = GUARD_ACTOR
            mode.updated_at_unix_ms = state.decided_at_unix_ms
            mode.reason = reason
            await self._stores.plans.put_auto_mode(mode)
        log.warning(
            "guard fired", pool=pool, version=state.version, action=action,
            generation=moved.generation, before_p99_s=state.before_p99_s,
            after_p99_s=state.after_p99_s,
        )  # fmt: skip
