"""Workloads the load generator replays: the simulator's generators, by name.

``make_workload`` (:mod:`sim.workloads.registry`) knows ``paper``, ``whales``, ``lowshare``,
``tenants`` (the local demo's long-shared-context regime) and ``trace``. Options are
``NAME=VALUE`` strings converted to the option's type (int, float or string), as
``cachectl sim run --option`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.types import Workload
from sim.workloads.mooncake import TraceError
from sim.workloads.registry import (
    WORKLOADS,
    UnknownWorkloadError,
    WorkloadOptionError,
    make_workload,
)

NAMES = tuple(WORKLOADS)


class WorkloadError(ValueError):
    """A workload name, option or trace that cannot be used; the message says which."""


def convert(value: str) -> Any:
    """``"3"`` → 3, ``"2.5"`` → 2.5, ``"none"`` → None, anything else stays a string."""
    text = value.strip()
    if text.lower() == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_options(items: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise WorkloadError(f"--option {item!r}: expected NAME=VALUE")
        options[name.strip()] = convert(value)
    return options


def resolve(name: str, options: Mapping[str, Any], trace: Path | None = None) -> Workload:
    """The named workload built with ``options`` (``trace`` sets ``path`` of ``trace``)."""
    opts = dict(options)
    if trace is not None:
        if name != "trace":
            raise WorkloadError("--trace goes with --workload trace")
        opts["path"] = str(trace)
    try:
        return make_workload(name, **opts)
    except UnknownWorkloadError:
        raise WorkloadError(f"unknown workload {name!r}; known: {', '.join(NAMES)}") from None
    except (WorkloadOptionError, TraceError, TypeError, ValueError, OSError) as exc:
        if isinstance(exc, WorkloadError):
            raise
        raise WorkloadError(f"workload {name!r}: {exc}") from exc
