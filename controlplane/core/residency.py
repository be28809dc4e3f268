"""Residency from the engines' KV-cache events, as the control plane checks and derives it.

An agent with a KV-event subscriber adds ``NodeReport.residency``
(:mod:`agents.kv_subscriber`). Like every field of a report it is checked before it is stored:
rates finite, >= 0 and at most :data:`MAX_RATE`, so a broken agent cannot poison the pressure
the routers may read. *Eviction pressure* is the fraction of a node's KV capacity evicted per
second: 0.01 means the whole cache turns over in 100 s, so a prefix not touched for that long is
likely gone. It needs the capacity (the engine's ``cache_config_info``); without it, none.

Planned keys: the control plane tells each agent which of the active plan's keys are placed on
its node and which block ends each key's shared prefix (its *anchor*, from the routers' sampled
prompt blocks); the agent answers with the keys whose anchor is not resident. A key absent on a
node where it is planned has *collapsed* there: its planned hit is not being delivered. The
anchors are the routers' block hashes, which match the engine's only when both hash prompts
alike (the simulated engine does; vLLM and SGLang hash token ids, docs/real-engines.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from cacheroute.v1 import agent_pb2, cluster_pb2
from dataplane.core.table import RoutingTable

MAX_RATE = 1e9  # blocks per second; far above any engine, far below overflow
MAX_WATCH = 1024  # planned keys watched per node (and absent keys an agent may report)
MAX_VERSION_TEXT = 64


class InvalidResidencyError(ValueError):
    """A residency section with a rate that is not a finite number in [0, MAX_RATE]."""


def check_residency(residency: agent_pb2.KvResidency) -> None:
    if len(residency.absent_keys) > MAX_WATCH or len(residency.watch_version) > MAX_VERSION_TEXT:
        raise InvalidResidencyError(
            f"residency: at most {MAX_WATCH} absent keys and a version of at most "
            f"{MAX_VERSION_TEXT} characters, got {len(residency.absent_keys)} and "
            f"{len(residency.watch_version)}"
        )
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


# -- planned keys: which prefix to watch, and where it collapsed --------------------------------


def prefix_anchors(
    samples: Iterable[tuple[int, Sequence[int]]], sizes: Mapping[int, float] | None = None
) -> dict[int, int]:
    """key hash → the block that ends its shared prefix, from sampled (key, prompt blocks).

    With two or more samples of a key: the last block of their longest common prefix. With one:
    its block at the key's reported shared size (``sizes``, blocks), else its first block (the
    head, which an LRU cache evicts last: a conservative anchor). Keys whose samples share no
    block get none.
    """
    common: dict[int, list[int]] = {}
    count: Counter[int] = Counter()
    for key, blocks in samples:
        if not blocks:
            continue
        count[key] += 1
        held = common.get(key)
        if held is None:
            common[key] = list(blocks)
            continue
        n = 0
        for a, b in zip(held, blocks, strict=False):
            if a != b:
                break
            n += 1
        del held[n:]
    known = sizes or {}
    anchors: dict[int, int] = {}
    for key, prefix in common.items():
        end = len(prefix)
        if count[key] == 1:
            end = max(1, min(round(known.get(key, 0.0)), end))
        if end:
            anchors[key] = prefix[end - 1]
    return anchors


def watch_lists(
    table: RoutingTable, anchors: Mapping[int, int], limit: int = MAX_WATCH
) -> dict[str, list[tuple[int, int]]]:
    """node id → the (key hash, anchor) of the table's keys placed on it, at most ``limit``."""
    lists: dict[str, list[tuple[int, int]]] = {}
    nodes = table.node_ids
    for key in sorted(anchors):
        members = table.destinations(key)
        for index in members or ():
            watched = lists.setdefault(nodes[index], [])
            if len(watched) < limit:
                watched.append((key, anchors[key]))
    return lists


def collapsed_keys(reports: Iterable[agent_pb2.NodeReport], version: str) -> dict[int, list[str]]:
    """key hash → nodes whose engine no longer holds the key's planned prefix, by reports that
    watched ``version`` (the active plan); reports about another version say nothing."""
    gone: dict[int, list[str]] = {}
    for report in reports:
        residency = report.residency
        if not report.HasField("residency") or residency.watch_version != version or not version:
            continue
        for key in residency.absent_keys:
            gone.setdefault(key, []).append(report.node_id)
    return gone


def demote(
    key_hashes: Sequence[int], rates: Sequence[float], collapsed: Mapping[int, list[str]]
) -> tuple[list[float], list[int], float]:
    """Rates with every collapsed key's set to 0 (a key of rate 0 is never admitted: it goes to
    the tail for this plan), the demoted keys, and their total rate (still traffic: the tail's)."""
    out = list(rates)
    demoted: list[int] = []
    moved = 0.0
    for i, key in enumerate(key_hashes):
        if int(key) in collapsed and out[i] > 0:
            demoted.append(int(key))
            moved += out[i]
            out[i] = 0.0
    return out, demoted, moved
