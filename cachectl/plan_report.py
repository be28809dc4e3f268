"""How a plan is shown: one summary (JSON and human lines), destinations and top keys.

Shared by every `plan` subcommand that describes a plan file. The JSON has the shape the control
plane answers with for a stored plan (`PlanSummary`, `GetPlanResponse` in the proto3 JSON
mapping: 64-bit integers as strings, fields under `metadata`), so a script reads a plan file's
`plan show --json` and a stored version's the same way.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict

from cachectl.output import format_table
from cacheroute.v1 import table_pb2
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import params_to_proto, stats_to_proto


def plan_summary(table: RoutingTable, *, table_bytes: int) -> dict[str, Any]:
    """A plan file as the control plane's ``PlanSummary`` JSON (not stored, so not active)."""
    meta = table_pb2.PlanMetadata(
        pool=table.pool,
        version=table.version,
        content_hash=table.content_hash,
        created_at_unix_ms=table.created_at_unix_ms,
        source="file",
        params=params_to_proto(table.params),
        stats=stats_to_proto(table.stats),
        table_bytes=table_bytes,
    )
    as_json = MessageToDict(
        meta, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return {"metadata": as_json, "active": False}


def key_assignments(table: RoutingTable, limit: int) -> list[dict[str, Any]]:
    """The top keys as the control plane's ``KeyAssignment`` JSON (key_hash as a string)."""
    return [
        {"key_hash": str(row["key_hash"]), "key": row["key"], "rate": row["rate"],
         "node_ids": row["destinations"]}
        for row in top_key_rows(table, limit)
    ]  # fmt: skip


def summary(table: RoutingTable) -> dict[str, Any]:
    """The plan's identity, parameters and statistics as JSON-ready fields."""
    stats, params = table.stats, table.params
    return {
        "pool": table.pool,
        "version": table.version,
        "content_hash": table.content_hash,
        "created_at_unix_ms": table.created_at_unix_ms,
        "num_nodes": len(table.node_ids),
        "placement": params.placement,
        "q_cap": params.q_cap,
        "slots_per_node": params.slots_per_node,
        "num_keys": stats.num_keys,
        "admitted_keys": stats.admitted_keys,
        "admitted_rate_share": stats.admitted_rate_share,
        "total_rate": stats.total_rate,
        "tail_rate": stats.tail_rate,
        "slots_used": stats.slots_used,
        "slots_total": stats.slots_total,
        "max_replicas": stats.max_replicas,
        "planned_imbalance": stats.planned_imbalance,
        "build_ms": stats.build_ms,
        "table_bytes": table.nbytes,
    }


def summary_lines(table: RoutingTable) -> list[str]:
    """The summary for people: what the plan is, what it admits, how balanced it is."""
    stats, params = table.stats, table.params
    weights = " (weighted)" if params.node_weights else ""
    seed = f", seed {params.seed}" if params.placement == "random" else ""
    rows = [
        ("pool", table.pool),
        ("version", table.version),
        ("content hash", table.content_hash),
        (
            "destinations",
            f"{len(table.node_ids)}{weights}; {params.placement} placement{seed}, "
            f"q_cap {params.q_cap:g} req/s, {params.slots_per_node} slots each",
        ),
        (
            "keys",
            f"{stats.num_keys:,} in the input, {stats.admitted_keys:,} admitted "
            f"({stats.admitted_rate_share:.1%} of {stats.total_rate:,.6g} req/s)",
        ),
        (
            "warm slots",
            f"{stats.slots_used:,} of {stats.slots_total:,} used, "
            f"up to {stats.max_replicas} replicas per key",
        ),
        ("cold tail", f"{stats.tail_rate:,.6g} req/s, spread by power-of-two choices"),
        ("imbalance", f"{stats.planned_imbalance:.4f} (max/mean planned load per destination)"),
        ("build time", f"{stats.build_ms:.2f} ms"),
    ]
    width = max(len(name) for name, _ in rows)
    return [f"  {name.ljust(width)}  {value}" for name, value in rows]


def node_rows(table: RoutingTable) -> list[dict[str, Any]]:
    """Each destination with its planned load and capacity weight."""
    weights = table.params.node_weights or (1.0,) * len(table.node_ids)
    loads = table.stats.planned_load or (0.0,) * len(table.node_ids)
    return [
        {"node": node, "weight": weight, "planned_load": load}
        for node, weight, load in zip(table.node_ids, weights, loads, strict=True)
    ]


def top_key_rows(table: RoutingTable, limit: int) -> list[dict[str, Any]]:
    """The highest-rate admitted keys (labels kept by the planner) with their destinations."""
    return [
        {
            "key": label.key,
            "key_hash": label.key_hash,
            "rate": label.rate,
            "destinations": table.destination_ids(label.key_hash) or [],
        }
        for label in table.top_keys[:limit]
    ]


def format_nodes(table: RoutingTable) -> str:
    rows = node_rows(table)
    return format_table(
        ["node", "weight", "planned req/s"],
        [[row["node"], row["weight"], row["planned_load"]] for row in rows],
    )


def format_top_keys(rows: list[dict[str, Any]]) -> str:
    return format_table(
        ["#", "key", "req/s", "destinations"],
        [
            [
                rank,
                row["key"] or f"#{row['key_hash']:016x}",
                row["rate"],
                ",".join(row["destinations"]),
            ]
            for rank, row in enumerate(rows, start=1)
        ],
    )
