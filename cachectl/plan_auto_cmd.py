"""`cachectl plan auto enable|disable --pool P`: a pool's automatic mode (auto_mode.py).

When on, the control-plane leader builds a plan every ``--auto-interval``, shadow-replays it and
rolls out only passing plans, and the live guard watches each of those rollouts. The switch is
audited with the actor (the authenticated caller when auth is on; the ``write`` role).
"""

from __future__ import annotations

import argparse
from typing import Any

from cachectl.admin_client import actor as actor_of
from cachectl.admin_client import add_target_flags, connect, to_json
from cachectl.output import print_json
from cacheroute.v1 import admin_pb2, cluster_pb2


def mode_line(mode: cluster_pb2.AutoMode) -> str:
    state = "on" if mode.enabled else "off"
    text = f"automatic mode: {state} (set by {mode.actor or '?'}"
    text += f": {mode.reason})" if mode.reason else ")"
    if mode.last_decision:
        text += f"; last round: {mode.last_decision}"
    return text


def _set(args: argparse.Namespace) -> int:
    request = admin_pb2.SetAutoModeRequest(
        pool=args.pool or "default",
        enabled=args.auto_command == "enable",
        actor=actor_of(args),
        reason=args.reason or "",
    )
    with connect(args) as client:
        mode = client.call(client.plans.SetAutoMode, request)
    if args.json:
        print_json(to_json(mode))
    else:
        print(f"pool {mode.pool}: {mode_line(mode)}")
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "auto", help="turn a pool's automatic mode on or off", description=__doc__
    )
    auto_sub = parser.add_subparsers(dest="auto_command", metavar="enable|disable", required=True)
    for name, text in (
        ("enable", "plan, shadow and roll out passing plans by itself, guarded"),
        ("disable", "stop automatic rounds (the active plan stays as it is)"),
    ):
        p = auto_sub.add_parser(name, help=text, description=text)
        p.add_argument("--pool", default="", help="pool (default: the default pool)")
        p.add_argument("--reason", help="recorded in the audit trail")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        add_target_flags(p)
        p.set_defaults(handler=_set)
