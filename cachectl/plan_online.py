"""The online ``plan`` commands: talk to a control plane (``--target HOST:PORT``).

``register(sub)`` adds ``import``, ``list`` and ``prune`` to the ``plan`` group (the pointer
moves, ``rollout``, ``rollback`` and ``disable``, are :mod:`cachectl.plan_moves`; ``shadow`` is
:mod:`cachectl.plan_shadow_cmd`, ``diff`` :mod:`cachectl.plan_diff_cmd`); :func:`build` and
:func:`show` are the online modes of ``plan build`` (no ``--rates``: from the live rate
estimates) and ``plan show VERSION`` (a stored version), which ``cachectl.plan_cmd`` dispatches
to. Every command takes ``--json`` (one JSON object, the proto3 JSON mapping of the answer) and
otherwise prints aligned tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from cachectl.admin_client import actor as actor_of
from cachectl.admin_client import (
    add_target_flags,
    connect,
    to_json,
)
from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from cachectl.plan_refs import fetch_plan
from cachectl.plan_text import (
    SUMMARY_HEADERS,
    next_steps,
    pointer_line,
    print_plan,
    summary_rows,
)
from cacheroute.v1 import admin_pb2, cluster_pb2, table_pb2

# Flags of the offline ``plan build`` that mean nothing to a live build.
OFFLINE_ONLY_BUILD_FLAGS = ("num_nodes", "nodes", "out", "weights")


# -- handlers ---------------------------------------------------------------------------------


def build(args: argparse.Namespace) -> int:
    """``plan build`` without ``--rates``: build from live rates and store (not activate)."""
    for flag in OFFLINE_ONLY_BUILD_FLAGS:
        if getattr(args, flag, None) is not None:
            raise CliError(
                f"--rates is required with --{flag.replace('_', '-')} (an offline build); "
                "without --rates the control plane builds from its live rates"
            )
    request = admin_pb2.BuildPlanRequest(
        pool=args.pool or "", placement=args.placement or "", actor=actor_of(args)
    )
    request.note = getattr(args, "note", None) or ""
    if args.q_cap is not None:
        request.q_cap = args.q_cap
    if args.slots_per_node is not None:
        if args.slots_per_node < 0:
            raise CliError(f"--slots-per-node must be >= 0, got {args.slots_per_node}")
        request.slots_per_node = args.slots_per_node
    with connect(args) as client:
        summary = client.call(client.plans.BuildPlan, request)
    if args.json:
        print_json(to_json(summary))
    else:
        print_plan(summary, "built")
        print("\n".join(next_steps(summary.metadata.version)))
    return 0


def show(args: argparse.Namespace, version: str) -> int:
    """``plan show VERSION``: a stored plan's metadata and its top keys with destinations.

    ``version`` is what the user typed where a plan file was expected and no such file exists,
    so the errors say both: no file, and (for a version-shaped argument) what the server said.
    """
    request = admin_pb2.GetPlanRequest(pool=args.pool or "", version=version, top_keys=args.top)
    plan = fetch_plan(args, request)
    if args.json:
        print_json(to_json(plan))
        return 0
    print_plan(plan.summary, "plan")
    params = plan.summary.metadata.params
    print(
        f"placement {params.placement}, q_cap {params.q_cap:g} req/s, "
        f"{params.slots_per_node} slots per node"
    )
    rows = [[k.key or f"#{k.key_hash:016x}", k.rate, ",".join(k.node_ids)] for k in plan.top_keys]
    print_table(("KEY", "RATE", "NODES"), rows)
    return 0


def _import(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{args.file}: cannot read: {exc.strerror}") from None
    table = table_pb2.RoutingTable()
    try:
        table.ParseFromString(data)
    except DecodeError:
        raise CliError(f"{args.file}: not a plan file (a serialized RoutingTable)") from None
    request = admin_pb2.ImportPlanRequest(table=table, actor=actor_of(args), note=args.note or "")
    with connect(args) as client:
        summary = client.call(client.plans.ImportPlan, request)
    if args.json:
        print_json(to_json(summary))
    else:
        print_plan(summary, "stored")
        print("\n".join(next_steps(summary.metadata.version)))
    return 0


def _list(args: argparse.Namespace) -> int:
    request = admin_pb2.ListPlansRequest(pool=args.pool or "", limit=args.limit)
    with connect(args) as client:
        listed = client.call(client.plans.ListPlans, request)
    if args.json:
        print_json(to_json(listed))
        return 0
    pointer = cluster_pb2.ActivePointer(pool=args.pool or "default")
    if listed.HasField("active"):
        pointer = listed.active
    print(pointer_line(pointer))
    print_table(SUMMARY_HEADERS, summary_rows(list(listed.plans)))
    return 0


def _prune(args: argparse.Namespace) -> int:
    """``plan prune``: delete old versions; never the active one or the rollback target."""
    if args.keep is not None and args.keep < 1:
        raise CliError(f"--keep must be >= 1, got {args.keep}")
    request = admin_pb2.PrunePlansRequest(
        pool=args.pool or "", keep=args.keep or 0, dry_run=args.dry_run, actor=actor_of(args)
    )
    with connect(args) as client:
        answer = client.call(client.plans.PrunePlans, request)
        # The answer names what went and what was kept for a reason; the newest N kept are
        # what the pool lists besides those (issue 34: the report hid them).
        size = answer.kept + len(answer.protected) + len(answer.removed) + 1
        listed = client.call(
            client.plans.ListPlans, admin_pb2.ListPlansRequest(pool=args.pool or "", limit=size)
        )
    if args.json:
        print_json(to_json(answer))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    print(f"kept the newest {answer.kept}; {verb} {len(answer.removed)}")
    gone = set(answer.removed) | set(answer.protected)
    newest = [p.metadata.version for p in listed.plans if p.metadata.version not in gone]
    rows: list[list[object]] = [[v, verb] for v in answer.removed]
    rows += [[v, f"kept: {why}"] for v, why in sorted(answer.protected.items())]
    rows += [[v, "kept: newest"] for v in newest]
    if rows:
        print_table(("VERSION", "OUTCOME"), rows)
    return 0


# -- parsers ----------------------------------------------------------------------------------


def subcommand(
    sub: Any, name: str, help_text: str, handler: Any, *, pool: bool = True
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    if pool:
        parser.add_argument("--pool", default="", help="pool (default: the default pool)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=handler)
    return parser


def register(sub: Any) -> None:
    """Add the control-plane-only ``plan`` subcommands to the ``plan`` group's subparsers."""
    p = subcommand(
        sub, "import", "store a plan file in the control plane (not activated)", _import, pool=False
    )
    p.add_argument("file", metavar="PLAN", help="plan file written by `plan build --rates`")
    p.add_argument("--note", help="free text stored with the plan")

    p = subcommand(sub, "list", "stored plan versions, newest first, and the active one", _list)
    p.add_argument("--limit", type=int, default=50, help="how many (default: %(default)s)")

    p = subcommand(
        sub, "prune",
        "delete stored versions beyond the newest N; never the active one, the rollback target "
        "or the live guard's (audited)",
        _prune,
    )  # fmt: skip
    p.add_argument(
        "--keep", type=int, metavar="N",
        help="newest versions to keep (default: the control plane's --plan-retention)",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="say what would go, delete nothing")
