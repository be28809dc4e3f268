"""Workload generators, trace replays and arrival processes for the simulator.

``make_workload(name, **options)`` builds one by name (``paper``, ``whales``, ``lowshare``,
``trace``); every workload has ``requests(qps=, duration_s=, seed=) -> list[SimRequest]``.
``docs/components/workloads.md`` documents how each is built and where every parameter comes from.
"""

from __future__ import annotations

from sim.workloads.registry import (
    WORKLOADS,
    UnknownWorkloadError,
    WorkloadOptionError,
    make_workload,
)

__all__ = ["WORKLOADS", "UnknownWorkloadError", "WorkloadOptionError", "make_workload"]
