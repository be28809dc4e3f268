"""The offline plan commands: build a plan from a rates file, show a plan file, explain a route.

They need no server: the planner and the router's policy code run in this process. A plan file
is the serialized ``cacheroute.v1.RoutingTable``, exactly what the control plane stores, so a file
built here can later be imported as a plan version.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import sys
from pathlib import Path

from cachectl import plan_report
from cachectl.errors import CliError
from cachectl.output import print_json
from cachectl.rates_file import read_rates
from controlplane.core.planner import PlanError, PlanInput, build_plan
from dataplane.core.keys import InvalidKeyError, hash_key, prompt_blocks, validate_key
from dataplane.core.load_view import LoadView, NodeSet
from dataplane.core.names import InvalidNameError, validate_node_id, validate_pool
from dataplane.core.policies import Request, UnknownPolicyError, make_policy
from dataplane.core.table import MAX_NODES, RoutingTable, TableError
from dataplane.core.table_codec import decode_table, encode_table

# -- build ------------------------------------------------------------------------------------


def node_ids(args: argparse.Namespace) -> list[str]:
    """Destinations from ``--nodes a,b,c`` or ``--num-nodes N`` (named node-0..node-N-1)."""
    if args.nodes is not None:
        ids = [part.strip() for part in args.nodes.split(",")]
        if any(not node for node in ids):
            raise CliError(f"--nodes {args.nodes!r}: an id is empty")
        repeated = sorted({node for node in ids if ids.count(node) > 1})
        if repeated:
            raise CliError(f"--nodes: {', '.join(repeated)} listed more than once")
        for node in ids:  # the control plane's rules, so the plan can be imported and rolled out
            try:
                validate_node_id(node)
            except InvalidNameError as exc:
                raise CliError(f"--nodes: {exc}") from None
    elif args.num_nodes is not None:
        if not 1 <= args.num_nodes <= MAX_NODES:
            raise CliError(f"--num-nodes must be between 1 and {MAX_NODES}, got {args.num_nodes}")
        ids = [f"node-{i}" for i in range(args.num_nodes)]
    else:
        raise CliError("one of --num-nodes N or --nodes a,b,c is required")
    if len(ids) > MAX_NODES:
        raise CliError(f"--nodes lists {len(ids)} destinations; the limit is {MAX_NODES}")
    return ids


def node_weights(text: str | None, count: int) -> list[float]:
    if text is None:
        return []
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise CliError(f"--weights {text!r}: expected comma-separated numbers") from None
    if len(weights) != count:
        raise CliError(f"--weights lists {len(weights)} weights for {count} destinations")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise CliError(f"--weights {text!r}: every weight must be a positive number")
    return weights


def _check_build_flags(args: argparse.Namespace) -> None:
    for flag, value in (
        ("--q-cap", args.q_cap),
        ("--slots-per-node", args.slots_per_node),
        ("--out", args.out),
    ):
        if value is None:
            raise CliError(f"{flag} is required with --rates")
    if not (math.isfinite(args.q_cap) and args.q_cap > 0):
        raise CliError(f"--q-cap must be a positive number of requests/s, got {args.q_cap}")
    if args.slots_per_node < 0:
        raise CliError(f"--slots-per-node must be >= 0, got {args.slots_per_node}")
    if not 0 <= args.seed < 2**64:
        raise CliError(f"--seed must be between 0 and 2**64 - 1, got {args.seed}")
    if not args.pool:
        raise CliError("--pool must not be empty")
    try:  # the control plane's rules, so the plan can be imported
        validate_pool(args.pool)
    except InvalidNameError as exc:
        raise CliError(f"--pool: {exc}") from None
    out = Path(args.out)
    if out.is_dir():
        raise CliError(f"--out {out}: is a directory")
    if not out.parent.is_dir():
        raise CliError(f"--out {out}: directory {out.parent} does not exist")


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename.

    Readers (and a crash) see the old file or the complete new one, never a partial file.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CliError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def build(args: argparse.Namespace) -> int:
    """``plan build --rates FILE``: run the planner and write the table to ``--out``."""
    _check_build_flags(args)
    nodes = node_ids(args)
    weights = node_weights(args.weights, len(nodes))
    rates = read_rates(Path(args.rates))
    try:
        table = build_plan(
            PlanInput(
                key_hashes=rates.key_hashes,
                rates=rates.rates,
                node_ids=nodes,
                q_cap=args.q_cap,
                slots_per_node=args.slots_per_node,
                node_weights=weights,
                placement=args.placement,
                seed=args.seed,
                pool=args.pool,
                key_labels=rates.labels,
            )
        )
    except (PlanError, TableError) as exc:
        raise CliError(f"cannot build the plan: {exc}") from None
    data = encode_table(table)
    out = Path(args.out)
    write_atomically(out, data)
    if args.json:
        summary = plan_report.plan_summary(table, table_bytes=len(data))
        print_json({**summary, "out": str(out)})
    else:
        print(f"wrote plan {table.version} to {out} ({len(data):,} bytes)")
        print("\n".join(plan_report.summary_lines(table)))
        print(f"to route with it: cachectl plan import {out}, then the steps it prints")
    return 0


# -- show -------------------------------------------------------------------------------------


def read_plan(path: Path) -> RoutingTable:
    """Decode and fully validate a plan file (content hash included)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return decode_table(data)
    except TableError as exc:
        raise CliError(f"{path}: not a valid plan: {exc}") from None


def show(args: argparse.Namespace, path: Path) -> int:
    """``plan show FILE``: the summary, planned load per destination and the top keys."""
    if args.top < 0:
        raise CliError(f"--top must be >= 0, got {args.top}")
    table = read_plan(path)
    top = plan_report.top_key_rows(table, args.top)
    if args.json:
        print_json(
            {
                "summary": plan_report.plan_summary(table, table_bytes=path.stat().st_size),
                "top_keys": plan_report.key_assignments(table, args.top),
                "path": str(path),
                "nodes": plan_report.node_rows(table),
            }
        )
        return 0
    print(f"plan {table.version} ({path})")
    print("\n".join(plan_report.summary_lines(table)))
    print()
    print(plan_report.format_nodes(table))
    if top:
        print()
        print(f"top {len(top)} keys by rate (of {table.num_keys:,} warm keys)")
        print(plan_report.format_top_keys(top))
    return 0


# -- route ------------------------------------------------------------------------------------


def route(args: argparse.Namespace, table: RoutingTable) -> int:
    """``plan route PLAN --key K``: a router's decision with all loads 0 and all nodes healthy
    (``table`` from a file or a stored version: :mod:`cachectl.plan_refs`)."""
    try:
        validate_key(args.key)
    except InvalidKeyError as exc:
        raise CliError(f"--key: {exc}") from None
    try:
        policy = make_policy(args.policy, seed=args.seed)
    except UnknownPolicyError as exc:
        raise CliError(f"--policy: {exc}") from None
    view = LoadView(NodeSet(table.node_ids), table=table)
    key_hash = hash_key(args.key)
    blocks = prompt_blocks(args.prompt) if args.prompt else ()
    request = Request(key_hash, blocks, flow=args.conversation or 0, opening=args.opening)
    decision = policy.choose(request, view)
    node = view.nodes.ids[decision.node]
    warm_set = table.destination_ids(key_hash)
    if args.json:
        print_json(
            {
                "key": args.key,
                "key_hash": str(key_hash),  # 64-bit: a string, as in every JSON cachectl prints
                "policy": policy.name,
                "version": table.version,
                "node": node,
                "reason": str(decision.reason),
                "warm": warm_set is not None,
                "destinations": warm_set,
            }
        )
        return 0
    rows = [
        ("key", args.key),
        ("key hash", f"{key_hash} (0x{key_hash:016x})"),
        ("plan", f"{table.version}; loads all 0, every destination healthy"),
        ("policy", policy.name),
        ("decision", f"{node} ({decision.reason})"),
        ("warm set", ", ".join(warm_set) if warm_set else "none: the key is in the cold tail"),
    ]
    width = max(len(name) for name, _ in rows)
    sys.stdout.write("".join(f"{name.ljust(width)}  {value}\n" for name, value in rows))
    return 0
