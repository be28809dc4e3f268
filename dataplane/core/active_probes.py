"""Active health probes: the fallback that finds a dead engine when nothing else can.

Health normally comes from the control plane's snapshots, and while every control plane is away
from the callers' reports (:mod:`dataplane.core.outliers`). A ``Route`` caller that never sends
``Release`` outcomes reports nothing, so with snapshots gone too a dead engine would keep its
share of decisions indefinitely. Only then does the router probe:

* a pool is probed while its snapshot is older than ``after_stale_s`` (the router's own view of
  staleness: the time since it last applied a snapshot), every ``interval_s``; each destination
  of the pool's membership gets one probe (a TCP connect to its address within ``timeout_s``);
* after ``failures`` failed probes in a row a destination is **ejected** (added to the view's
  ejected set next to passive health's, :func:`dataplane.core.outliers.apply_ejections`); the
  first successful probe **restores** it;
* the cap is passive health's: at most ``max(1, floor(share x undrained members))`` of a pool
  ejected at once, by either mechanism, never the last one (a router whose own network broke
  would otherwise eject every engine); a refused ejection stays pending and is retried on the
  next failed probe;
* a round in which *no* destination accepted a connection ejects nothing: the router's own
  network (or a network policy between routers and engines, when only the callers reach them)
  is then the likelier cause than every engine dying at once;
* when a fresh snapshot arrives the control plane's health is the truth again: every probe
  ejection and streak is dropped (:meth:`ActiveProbes.reset`).

Pure: the caller probes, keeps the clock and passes ages in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from dataplane.core.load_view import LoadView
from dataplane.core.outliers import OutlierDetector, apply_ejections, room_to_eject, undrained


@dataclass(frozen=True)
class ProbeConfig:
    """When and how the router probes (``python -m dataplane --help``: ``--active-probe-*``)."""

    interval_s: float = 2.0  # 0: active probes off
    after_stale_s: float = 10.0
    failures: int = 3
    timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.interval_s < 0 or self.after_stale_s < 0:
            raise ValueError(
                f"interval_s and after_stale_s must be >= 0, got {self.interval_s} and "
                f"{self.after_stale_s}"
            )
        if self.failures < 1 or not self.timeout_s > 0:
            raise ValueError(
                f"need failures >= 1 and timeout_s > 0, got {self.failures} and {self.timeout_s}"
            )

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0


def should_probe(config: ProbeConfig, snapshot_age_s: float | None) -> bool:
    """Whether a pool is probed now: probes are on and its snapshot is too old (``None``: it
    never had one, so it has no membership to probe either)."""
    return config.enabled and snapshot_age_s is not None and snapshot_age_s > config.after_stale_s


class ProbeChange(NamedTuple):
    """An ejection or a restore one probe result caused (for the log line and metrics)."""

    node_id: str
    ejected: bool
    failures: int  # consecutive failed probes (0 for a restore)


class ActiveProbes:
    """One pool's probe streaks and probe ejections, keyed by node id (module docstring)."""

    def __init__(self, config: ProbeConfig, max_ejected_share: float = 0.5) -> None:
        self.config = config
        self.max_ejected_share = max_ejected_share
        self.ejected: frozenset[str] = frozenset()
        self.overflows = 0  # ejections refused by the cap
        self._streaks: dict[str, int] = {}

    def record(
        self, node_id: str, ok: bool, members: int, others: frozenset[str] = frozenset()
    ) -> ProbeChange | None:
        """One probe's result on ``node_id``; the change it causes. ``members``: the pool's
        undrained destinations; ``others``: those ejected by passive health (they share the
        cap)."""
        if ok:
            self._streaks.pop(node_id, None)
            if node_id in self.ejected:
                self.ejected = self.ejected - {node_id}
                return ProbeChange(node_id, False, 0)
            return None
        streak = self._streaks[node_id] = self._streaks.get(node_id, 0) + 1
        if node_id in self.ejected or streak < self.config.failures:
            return None
        if not self._room(members, others):
            self.overflows += 1
            return None
        self.ejected = self.ejected | {node_id}
        return ProbeChange(node_id, True, streak)

    def reset(self) -> list[str]:
        """Fresh snapshots again: drop every streak; the ids whose probe ejection ends."""
        restored = sorted(self.ejected)
        self.ejected = frozenset()
        self._streaks.clear()
        return restored

    def keep_only(self, node_ids: frozenset[str] | set[str]) -> None:
        """Forget destinations that left the pool."""
        for node_id in [n for n in self._streaks if n not in node_ids]:
            del self._streaks[node_id]
        self.ejected = self.ejected & frozenset(node_ids)

    def _room(self, members: int, others: frozenset[str]) -> bool:
        return room_to_eject(self.max_ejected_share, members, len(self.ejected | others))


def report_round(
    probes: ActiveProbes, detector: OutlierDetector, view: LoadView, results: Mapping[str, bool]
) -> list[ProbeChange]:
    """One round's results (node id → connected) on the pool ``view`` shows; the changes they
    caused, already shown to the view (through ``detector.probed``, next to passive health's).
    With no success in the round its failures are not counted (module docstring)."""
    if not any(results.values()):
        return []
    changes = []
    for node_id, ok in results.items():
        if node_id not in view.nodes.index:
            continue  # the node left the pool while it was probed
        change = probes.record(node_id, ok, undrained(view), detector.ejected)
        if change is not None:
            changes.append(change)
    if changes:
        detector.probed = probes.ejected
        apply_ejections(detector, view)
    return changes


def reset_probes(probes: ActiveProbes, detector: OutlierDetector, view: LoadView) -> list[str]:
    """Fresh snapshots again (module docstring): end every probe ejection; their ids."""
    restored = probes.reset()
    if restored or detector.probed:
        detector.probed = frozenset()
        apply_ejections(detector, view)
    return restored
