"""``cachectl plan diff A B``: keys added, removed and moved between two plans.

``A`` and ``B`` are each a plan file or a stored version (:mod:`cachectl.plan_refs`). Two stored
versions are compared by the control plane (``DiffPlans``), which also says how ``B`` was
replanned; with a file on either side both tables are compared here, with the same pure
comparison (:func:`controlplane.core.plan_diff.diff_plans`), so the answer has the same shape.
"""

from __future__ import annotations

import argparse
from typing import Any

from cachectl.admin_client import connect, to_json
from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from cachectl.plan_online import subcommand
from cachectl.plan_refs import plan_file, read_table
from cachectl.plan_text import replan_line
from cacheroute.v1 import admin_pb2, table_pb2
from controlplane.core.plan_diff import diff_plans
from dataplane.core.names import VERSION_PATTERN


def _stored(args: argparse.Namespace) -> tuple[admin_pb2.PlanDiff, table_pb2.PlanMetadata]:
    request = admin_pb2.DiffPlansRequest(
        pool=args.pool or "", from_version=args.old, to_version=args.new, limit=args.limit
    )
    with connect(args) as client:
        diff = client.call(client.plans.DiffPlans, request)
        target = client.call(
            client.plans.GetPlan,
            admin_pb2.GetPlanRequest(pool=args.pool or "", version=args.new, top_keys=1),
        ).summary.metadata
    return diff, target


def _diff(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    target: table_pb2.PlanMetadata | None = None
    refs = (args.old, args.new)
    if all(plan_file(r) is None and VERSION_PATTERN.match(r) for r in refs):
        diff, target = _stored(args)
    else:
        diff = diff_plans(read_table(args, args.old), read_table(args, args.new), args.limit)
    if args.json:
        print_json(to_json(diff))
        return 0
    print(f"{diff.from_version} -> {diff.to_version}: churn {diff.churn:.2%}")
    line = replan_line(target) if target is not None else None
    if line:
        print(f"{diff.to_version} was {line}")
    print_table(
        ("KEYS_FROM", "KEYS_TO", "ADDED", "REMOVED", "MOVED", "UNCHANGED"),
        [[diff.keys_from, diff.keys_to, diff.keys_added, diff.keys_removed, diff.keys_moved,
          diff.keys_unchanged]],
    )  # fmt: skip
    if diff.moves:
        rows = [
            [m.key or f"#{m.key_hash:016x}", ",".join(m.from_node_ids), ",".join(m.to_node_ids)]
            for m in diff.moves
        ]
        print(f"moved keys (up to {args.limit}, highest rate first):")
        print_table(("KEY", "FROM", "TO"), rows)
    return 0


def register(sub: Any) -> None:
    """Add ``diff`` to the ``plan`` group's subparsers."""
    p = subcommand(sub, "diff", "keys moved, added and removed between two plans", _diff)
    p.add_argument("old", metavar="A", help="from: a plan file or a stored version")
    p.add_argument("new", metavar="B", help="to: a plan file or a stored version")
    p.add_argument("--limit", type=int, default=20, help="moved keys to list (default: 20)")
