"""Workloads by name: ``make_workload(name, **options)``.

The registry is an explicit mapping (no import-time registration). Options are the workload
class's fields; an unknown option is an error that names it and lists the accepted ones.
``trace`` takes ``path=`` and detects the format from the file's content: gzip or JSON lines with
``hash_ranges`` are Claude Code sessions, JSON lines with ``hash_ids`` are a Mooncake trace.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.types import Workload
from sim.workloads.claude_code import ClaudeCodeWorkload
from sim.workloads.lowshare import LowShareWorkload
from sim.workloads.mooncake import MooncakeWorkload, TraceError
from sim.workloads.paper import PaperWorkload
from sim.workloads.tenants import TenantsWorkload
from sim.workloads.whales import WhalesWorkload


class UnknownWorkloadError(ValueError):
    """A workload name that is not in :data:`WORKLOADS`."""


class WorkloadOptionError(ValueError):
    """An option the named workload does not take, or a missing required one."""


def _build(cls: Callable[..., Workload], name: str, options: dict[str, Any]) -> Workload:
    accepted = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise WorkloadOptionError(
            f"workload {name!r} does not take {', '.join(unknown)}; it takes {', '.join(accepted)}"
        )
    return cls(**options)


def trace_format(path: str | Path) -> str:
    """``"claude_code"`` or ``"mooncake"``, from the file's first record."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace path {p} is not a file")
    with p.open("rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(p, "rt") as f:
        line = f.readline()
    try:
        first = json.loads(line)
    except ValueError as exc:
        raise TraceError(f"{p}: the first line is not JSON ({exc})") from exc
    if isinstance(first, dict) and "hash_ranges" in first:
        return "claude_code"
    if isinstance(first, dict) and "hash_ids" in first:
        return "mooncake"
    raise TraceError(f"{p}: neither Mooncake (hash_ids) nor Claude Code (hash_ranges) records")


def trace_workload(**options: Any) -> Workload:
    """A trace replay; ``path`` is required, the other options depend on the format."""
    if "path" not in options:
        raise WorkloadOptionError("workload 'trace' needs path=<trace file>")
    fmt = trace_format(options["path"])
    cls: Callable[..., Workload] = ClaudeCodeWorkload if fmt == "claude_code" else MooncakeWorkload
    return _build(cls, f"trace ({fmt})", options)


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "paper": lambda **o: _build(PaperWorkload, "paper", o),
    "whales": lambda **o: _build(WhalesWorkload, "whales", o),
    "lowshare": lambda **o: _build(LowShareWorkload, "lowshare", o),
    "tenants": lambda **o: _build(TenantsWorkload, "tenants", o),
    "trace": trace_workload,
}


def make_workload(name: str, **options: Any) -> Workload:
    """The workload called ``name``, built with ``options`` (see each workload's fields)."""
    factory = WORKLOADS.get(name)
    if factory is None:
        raise UnknownWorkloadError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    return factory(**options)
