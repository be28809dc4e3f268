"""Passive health: eject a destination that keeps failing, as Envoy's outlier detection does.

Routers learn health from the control plane's snapshots; while every control plane is away a
dead engine keeps looking healthy (and idle: its requests end at once, so its in-flight count is
low) and draws traffic without bound. The callers that see the engine's answers (the HTTP front;
``Release`` with an outcome) report each attempt here:

* a failure is a refused or reset connection, a first-byte timeout, a 5xx or a response broken
  mid-stream; anything else (a 2xx, a 4xx: the engine is alive and answering) is a success;
* after ``consecutive_failures`` failures in a row (default 5, Envoy's ``consecutive_5xx``) the
  destination is **ejected** for ``base_ejection_s × k`` (capped at ``max_ejection_s``), where
  ``k`` counts its recent ejections: one more per ejection, one less per ``base_ejection_s`` it
  spent back in the pool without being ejected (Envoy's multiplier);
* it **returns by itself** when that time is up, on probation: its first reported outcome
  decides: a success clears the record, a failure ejects it again at once (one misroute per
  return rather than ``consecutive_failures``);
* at most ``max(1, floor(max_ejected_share × members))`` destinations of a pool are ejected at
  once, and never the last one: an ejection past the cap is refused (counted as an overflow),
  so ejection cannot empty a pool. The load view also never lets ejection empty its eligible
  set (:meth:`~dataplane.core.load_view.LoadView.set_ejected`), which is how it composes with
  the panic threshold: panic decides the base set from the control plane's health (all
  undrained nodes in panic), ejection then removes this router's own first-hand failures.

Pure and clock-agnostic: every ``now`` is in the caller's clock (the router uses
``time.monotonic``; tests pass numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from dataplane.core.load_view import LoadView


@dataclass(frozen=True)
class OutlierConfig:
    """Thresholds of passive health checking (``python -m dataplane --help``: ``--outlier-*``)."""

    consecutive_failures: int = 5  # 0: passive health checking off
    base_ejection_s: float = 30.0
    max_ejection_s: float = 300.0
    max_ejected_share: float = 0.5

    def __post_init__(self) -> None:
        if self.consecutive_failures < 0:
            raise ValueError(f"consecutive_failures must be >= 0, got {self.consecutive_failures}")
        if not 0 < self.base_ejection_s <= self.max_ejection_s:
            raise ValueError(
                f"need 0 < base_ejection_s <= max_ejection_s, got {self.base_ejection_s} "
                f"and {self.max_ejection_s}"
            )
        if not 0.0 <= self.max_ejected_share <= 1.0:
            raise ValueError(f"max_ejected_share must be in [0, 1], got {self.max_ejected_share}")

    @property
    def enabled(self) -> bool:
        return self.consecutive_failures > 0


class Ejection(NamedTuple):
    """What one ejection decided (for the caller's log line and metrics)."""

    node_id: str
    failures: int  # consecutive failures that led to it (1 on probation)
    duration_s: float
    ejections: int  # the multiplier k after this ejection


class _Record:
    __slots__ = ("consecutive", "ejected_until", "multiplier", "probation", "returned_at")

    def __init__(self) -> None:
        self.consecutive = 0
        self.ejected_until: float | None = None
        self.multiplier = 0
        self.probation = False
        self.returned_at: float | None = None


class OutlierDetector:
    """One pool's failure streaks and ejections, keyed by node id (module docstring)."""

    def __init__(self, config: OutlierConfig) -> None:
        self.config = config
        self._records: dict[str, _Record] = {}
        self.ejected: frozenset[str] = frozenset()
        # Ejected by this router's active probes (dataplane.core.active_probes): shown to the
        # view with ours and counted against the same cap.
        self.probed: frozenset[str] = frozenset()
        self.overflows = 0  # ejections refused by the cap

    def success(self, node_id: str) -> None:
        """An attempt on ``node_id`` got an answer: its failure streak (and probation) ends."""
        record = self._records.get(node_id)  # healthy nodes have no record: one dict miss
        if record is not None and record.ejected_until is None:
            record.consecutive = 0
            record.probation = False

    def failure(self, node_id: str, now: float, members: int) -> Ejection | None:
        """An attempt on ``node_id`` failed; the ejection it causes, if any.

        ``members`` is the number of undrained destinations of the pool (the cap's base).
        """
        config = self.config
        if not config.enabled:
            return None
        record = self._records.get(node_id)
        if record is None:
            record = self._records[node_id] = _Record()
        if record.ejected_until is not None:
            return None  # an attempt started before the ejection: already counted
        record.consecutive += 1
        if not record.probation and record.consecutive < config.consecutive_failures:
            return None
        if not self._room(members):
            if record.consecutive == config.consecutive_failures or record.probation:
                self.overflows += 1
            return None
        multiplier = 1
        if record.returned_at is not None:
            decayed = int((now - record.returned_at) // config.base_ejection_s)
            multiplier = max(0, record.multiplier - decayed) + 1
        duration = min(config.base_ejection_s * multiplier, config.max_ejection_s)
        failures = record.consecutive
        record.multiplier = multiplier
        record.ejected_until = now + duration
        record.consecutive = 0
        record.probation = False
        self.ejected = self.ejected | {node_id}
        return Ejection(node_id, failures, duration, multiplier)

    def expire(self, now: float) -> list[str]:
        """Return every destination whose ejection time is up (on probation); their ids."""
        returned: list[str] = []
        for node_id in self.ejected:
            record = self._records[node_id]
            if record.ejected_until is not None and record.ejected_until <= now:
                record.ejected_until = None
                record.probation = True
                record.returned_at = now
                returned.append(node_id)
        if returned:
            self.ejected = self.ejected.difference(returned)
        return sorted(returned)

    def keep_only(self, node_ids: frozenset[str] | set[str]) -> None:
        """Forget destinations that left the pool (a membership change)."""
        for node_id in [n for n in self._records if n not in node_ids]:
            del self._records[node_id]
        if not self.ejected <= node_ids:
            self.ejected = self.ejected & frozenset(node_ids)
        if not self.probed <= node_ids:
            self.probed = self.probed & frozenset(node_ids)

    def ejected_until(self, node_id: str) -> float | None:
        record = self._records.get(node_id)
        return None if record is None else record.ejected_until

    def _room(self, members: int) -> bool:
        ejected = len(self.ejected | self.probed)
        return room_to_eject(self.config.max_ejected_share, members, ejected)


def room_to_eject(max_share: float, members: int, ejected: int) -> bool:
    """The one cap passive health and active probes share: one more ejection keeps at most
    ``max(1, floor(max_share x members))`` ejected and at least one member in service."""
    cap = max(1, math.floor(max_share * members))
    return ejected + 1 <= cap and members - ejected - 1 >= 1


def apply_ejections(detector: OutlierDetector, view: LoadView) -> None:
    """Show ``detector``'s ejected ids (its own and the probes') to ``view`` as node indices
    (after any change to either)."""
    index = view.nodes.index
    ejected = detector.ejected | detector.probed
    view.set_ejected(frozenset(index[n] for n in ejected if n in index))


def undrained(view: LoadView) -> int:
    """The ejection cap's base: the pool's undrained members."""
    return len(view.draining) - sum(view.draining)


def report_outcome(
    detector: OutlierDetector, view: LoadView, node_id: str, ok: bool, now: float
) -> Ejection | None:
    """One attempt's outcome on ``node_id`` of the pool ``view`` shows; the ejection it caused."""
    if ok:
        detector.success(node_id)
        return None
    if node_id not in view.nodes.index:
        return None  # the node left the pool meanwhile
    ejection = detector.failure(node_id, now, undrained(view))
    if ejection is not None:
        apply_ejections(detector, view)
    return ejection


def return_due(detector: OutlierDetector, view: LoadView, now: float) -> list[str]:
    """Let back the pool's destinations whose ejection is over; their ids."""
    if not detector.ejected:
        return []
    returned = detector.expire(now)
    if returned:
        apply_ejections(detector, view)
    return returned
