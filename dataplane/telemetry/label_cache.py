"""Metric children looked up once per label set.

prometheus_client's ``metric.labels(...)`` costs microseconds a call (it validates and hashes the
values under a lock); the doors paid it several times per request. A :class:`LabelCache` keeps
each (metric, label values) child after its first lookup. Label sets must be bounded, as they
are for every metric that uses it (stages, doors, sources, models capped at ``MAX_MODELS``).
"""

from __future__ import annotations

from typing import Any


class LabelCache:
    """``cache(metric, *values)``: ``metric.labels(*values)``, looked up once."""

    __slots__ = ("_children",)

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: Any, *values: str) -> Any:
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found
