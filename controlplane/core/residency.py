"""Residency from the engines' KV-cache events, as the control plane checks and derives it.

An agent with a KV-event subscriber adds ``NodeReport.residency``
(:mod:`agents.kv_subscriber`). Like every field of a report it is checked before it is stored:
rates finite, >= 0 and at most :data:`MAX_RATE`, so a broken agent cannot poison the pressure
the routers may read. *Eviction pressure* is the fraction of a node's KV capacity evicted per
second: 0.01 means the whole cache turns over in 100 s, so a prefix not touched for that long is
likely gone. It needs the capacity (the engine's ``cache_config_info``); without it, none.
"""

from __future__ import annotations

import math

from cacheroute.v1 import agent_pb2, cluster_pb2

MAX_RATE = 1e9  # blocks per second; far above any engine, far below overflow


class InvalidResidencyError(ValueError):
    """A residency section with a rate that is not a finite number in [0, MAX_RATE]."""


def check_residency(residency: agent_pb2.KvResidency) -> None:
    for name in ("evictions_per_s", "stores_per_s"):
        value = getattr(residency, name)
        if not (math.isfinite(value) and 0.0 <= value <= MAX_RATE):
            raise InvalidResidencyError(
                f"residency.{name} must be in [0, {MAX_RATE:g}], got {value!r}"
            )


def eviction_pressure(
    evictions_per_s: float, block_size: int, kv_capacity_tokens: int
) -> float | None:
    """Fraction of the KV capacity evicted per second (module docstring); None when unknown."""
    if block_size <= 0 or kv_capacity_tokens <= 0:
        return None
    return evictions_per_s * block_size / kv_capacity_tokens


def fill_load(load: cluster_pb2.NodeLoad, report: agent_pb2.NodeReport) -> None:
    """Copy a report's residency into the node's load entry (nothing when it has none)."""
    if not report.HasField("residency"):
        return
    residency = report.residency
    load.resident_blocks = residency.resident_blocks
    load.evictions_per_s = residency.evictions_per_s
    pressure = eviction_pressure(
        residency.evictions_per_s, report.block_size, report.kv_capacity_tokens
    )
    if pressure is not None:
        load.eviction_pressure = pressure
