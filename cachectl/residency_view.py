"""`cachectl status`: what the engines' KV-cache events say, per node (issue 31).

Shown only for nodes whose agents read KV events: blocks resident, evictions per second, eviction
pressure (the fraction of the node's KV capacity evicted per second) and, of the active plan's
keys placed on the node, how many its agent watches and how many have lost their shared prefix
there (those are demoted to the tail at the next plan build).
"""

from __future__ import annotations

from cachectl.output import print_table
from cacheroute.v1 import admin_pb2

HEADERS = ("NODE", "RESIDENT_BLOCKS", "EVICTIONS/S", "PRESSURE/S", "KEYS_WATCHED", "NOT_RESIDENT")


def residency_rows(nodes: list[admin_pb2.NodeStatus]) -> list[list[object]]:
    rows: list[list[object]] = []
    for n in nodes:
        load = n.load
        if not load.HasField("resident_blocks"):
            continue
        pressure = f"{load.eviction_pressure:.4f}" if load.HasField("eviction_pressure") else "-"
        rows.append(
            [
                n.record.node_id,
                load.resident_blocks,
                f"{load.evictions_per_s:.1f}",
                pressure,
                n.planned_keys_watched,
                n.planned_keys_not_resident,
            ]
        )
    return rows


def print_residency(nodes: list[admin_pb2.NodeStatus]) -> None:
    """The residency table, or nothing when no node reports KV events."""
    rows = residency_rows(nodes)
    if rows:
        print("  KV-cache residency (engine KV events):")
        print_table(HEADERS, rows)
