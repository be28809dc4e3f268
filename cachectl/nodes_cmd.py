"""`cachectl nodes ...`: the node registry of a control plane.

`add` registers a static destination (no agent: healthy with load 0 until removed or drained;
an id already registered needs --replace), `remove` forgets one (not while a live agent reports
for it: stop the agent, or drain the node), `drain`/`undrain` stop or resume routing to any
node, `list` shows every node with its state, load and report age, as routers treat it: a node
kept up by a new leader's grace shows as `healthy (leader grace)`, with the detail in `--json`'s
`reason`. KIND is the engine kind the node's agent reported (`vllm`, `sglang`, `llamacpp`,
`simulated`; `agent` before its first report says), or `static`; HIT the engine's prefix-cache
hit rate over the agent's last interval (`-`: unknown, e.g. no prompts in it).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from cachectl.admin_client import actor, add_target_flags, connect, duration_text, to_json
from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from cacheroute.v1 import admin_pb2, agent_pb2, cluster_pb2
from controlplane.core.node_states import state_of
from dataplane.core.addresses import InvalidEndpointError, check_endpoint

HEADERS = (
    "NODE", "ADDRESS", "KIND", "STATE", "LOAD", "RUNNING", "WAITING", "HIT", "WEIGHT", "REPORT_AGE"
)  # fmt: skip


def kind_text(record: cluster_pb2.NodeRecord) -> str:
    """``static``, the reported engine kind in lower case, or ``agent`` while it is unknown."""
    if record.static:
        return "static"
    if record.engine_kind == agent_pb2.ENGINE_KIND_UNSPECIFIED:
        return "agent"
    return agent_pb2.EngineKind.Name(record.engine_kind).removeprefix("ENGINE_KIND_").lower()


def hit_text(load: cluster_pb2.NodeLoad) -> str:
    return f"{load.prefix_hit_rate:.1%}" if load.HasField("prefix_hit_rate") else "-"


def node_rows(nodes: list[admin_pb2.NodeStatus]) -> list[list[object]]:
    return [
        [
            n.record.node_id,
            n.record.address,
            kind_text(n.record),
            f"{state_of(n)} ({n.reason.partition(':')[0]})" if n.reason else state_of(n),
            n.load.load,
            n.load.running,
            n.load.waiting,
            hit_text(n.load),
            n.load.weight,
            "-" if n.record.static else duration_text(n.last_report_age_ms),
        ]
        for n in nodes
    ]


def _add(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.weight) and args.weight >= 0):
        raise CliError(f"--weight must be a number >= 0, got {args.weight}")
    try:
        check_endpoint(args.address)
    except InvalidEndpointError as exc:
        raise CliError(f"--address {args.address!r}: {exc}") from None
    request = admin_pb2.AddNodeRequest(
        pool=args.pool, node_id=args.node_id, address=args.address, weight=args.weight
    )
    request.actor = actor(args)
    request.replace = bool(args.replace)
    with connect(args) as client:
        record = client.call(client.nodes.AddNode, request)
    if args.json:
        print_json(to_json(record))
    else:
        print(f"added static node {record.node_id} ({record.address}) to pool {record.pool}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    request = admin_pb2.RemoveNodeRequest(pool=args.pool, node_id=args.node_id, actor=actor(args))
    with connect(args) as client:
        answer = client.call(client.nodes.RemoveNode, request)
    if not answer.removed:
        raise CliError(f"node {args.node_id} is not registered in pool {args.pool or 'default'}")
    if args.json:
        print_json(to_json(answer))
    else:
        print(f"removed node {args.node_id}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        listed = client.call(client.nodes.ListNodes, admin_pb2.ListNodesRequest(pool=args.pool))
    if args.json:
        print_json(to_json(listed))
    else:
        print_table(HEADERS, node_rows(list(listed.nodes)))
    return 0


def _set_draining(args: argparse.Namespace, draining: bool) -> int:
    request = admin_pb2.SetDrainingRequest(
        pool=args.pool, node_id=args.node_id, draining=draining, actor=actor(args)
    )
    with connect(args) as client:
        status = client.call(client.nodes.SetDraining, request)
    if args.json:
        print_json(to_json(status))
    else:
        print_table(HEADERS, node_rows([status]))
    return 0


def _parser(sub: Any, name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("--pool", default="", help="pool (default: the default pool)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=handler)
    return parser


def register(sub: Any) -> None:
    group: argparse.ArgumentParser = sub.add_parser(
        "nodes", help="list, add, remove, drain nodes", description=__doc__
    )
    nodes = group.add_subparsers(dest="nodes_command", metavar="SUBCOMMAND", required=True)
    p = _parser(nodes, "add", "register a static destination (no agent)", _add)
    p.add_argument("node_id", metavar="ID")
    p.add_argument("--address", required=True, metavar="HOST:PORT", help="serving endpoint")
    p.add_argument(
        "--weight", type=float, default=0.0, help="relative capacity (0 means 1; default: 0)"
    )
    p.add_argument(
        "--replace", action="store_true", help="change the address or weight of a registered id"
    )
    p = _parser(
        nodes, "remove", "forget a node (refused while a live agent reports for it)", _remove
    )
    p.add_argument("node_id", metavar="ID")
    _parser(nodes, "list", "nodes with state, load and report age", _list)
    p = _parser(nodes, "drain", "stop routing to a node", lambda a: _set_draining(a, True))
    p.add_argument("node_id", metavar="ID")
    p = _parser(nodes, "undrain", "resume routing to a node", lambda a: _set_draining(a, False))
    p.add_argument("node_id", metavar="ID")
