"""``cachectl plan ...``: build, inspect and explain routing plans.

This module owns the ``plan`` parsers; where a plan lives decides which module does the work:

* **files** (:mod:`cachectl.plan_offline`): ``build --rates FILE --out PLAN``, ``show PLAN``,
  ``route PLAN --key K``, ``diff PLAN1 PLAN2``;
* **the control plane** (:mod:`cachectl.plan_online`): ``build`` without ``--rates`` (from the
  live rate estimates), ``show``, ``route`` and ``diff`` of stored versions (an argument naming
  an existing file stays offline: :mod:`cachectl.plan_refs`), and the ``import``, ``list``,
  ``rollout``, ``rollback`` and ``shadow`` subcommands, all talking to ``--target HOST:PORT``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cachectl import (
    plan_auto_cmd,
    plan_diff_cmd,
    plan_moves,
    plan_offline,
    plan_online,
    plan_refs,
    plan_shadow_cmd,
)
from cachectl.admin_client import add_target_flags
from dataplane.core.policies.registry import DEFAULT_POLICY
from dataplane.core.table import PLACEMENTS

Register = Callable[[Any], None]


# -- handlers ---------------------------------------------------------------------------------


def _build(args: argparse.Namespace) -> int:
    if args.rates is None:
        return plan_online.build(args)
    return plan_offline.build(args)


def _show(args: argparse.Namespace) -> int:
    path = plan_refs.plan_file(args.plan)
    if path is None:
        return plan_online.show(args, args.plan)
    return plan_offline.show(args, path)


def _route(args: argparse.Namespace) -> int:
    return plan_offline.route(args, plan_refs.read_table(args, args.plan))


# -- parsers ----------------------------------------------------------------------------------


def _register_build(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "build",
        help="build a plan (Algorithm 1) from a rates file or, online, from live rates",
        description="Run the CacheRoute planner on per-key rates and write the routing table; "
        "without --rates, the control plane builds one from its live rate estimates and stores "
        "it (not activated).",
    )
    parser.add_argument("--rates", metavar="RATES.csv", help="CSV with a header and key,rate")
    nodes = parser.add_mutually_exclusive_group()
    nodes.add_argument(
        "--num-nodes",
        type=int,
        metavar="N",
        help="destinations node-0..node-N-1 (a plan rolled out later must name the pool's "
        "registered nodes: prefer --nodes)",
    )
    nodes.add_argument(
        "--nodes", metavar="A,B,C",
        help="destination ids, comma-separated: the pool's node ids (`cachectl nodes list`)",
    )  # fmt: skip
    parser.add_argument(
        "--q-cap",
        type=float,
        metavar="Q",
        help="per-destination load target, req/s (required with --rates; online default: the "
        "control plane's --q-cap)",
    )
    parser.add_argument(
        "--slots-per-node",
        type=int,
        metavar="W",
        help="warm slots per destination (required with --rates; online default: the control "
        "plane's --slots-per-node)",
    )
    parser.add_argument(
        "--out", metavar="PLAN", help="where to write the plan file (required with --rates)"
    )  # fmt: skip
    parser.add_argument("--pool", default="default", help="pool name (default: %(default)s)")
    parser.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default="lpt",
        help="lpt (CacheRoute) or an ablation: hash, random (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of --placement random (default: 0)"
    )
    parser.add_argument("--weights", metavar="W1,W2,..", help="capacity weight per destination")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--note", help="online: free text stored with the plan")
    add_target_flags(parser)
    parser.set_defaults(handler=_build)


def _register_show(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "show", help="summary, planned loads and top keys of a plan"
    )
    parser.add_argument("plan", metavar="PLAN", help="plan file, or a stored VERSION (online)")
    parser.add_argument("--pool", default="", help="online: pool of VERSION (default: default)")
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="top keys to list (default: 10)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=_show)


def _register_route(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "route",
        help="what a router would decide for a key (equal loads, all healthy)",
    )
    parser.add_argument("plan", metavar="PLAN", help="plan file, or a stored VERSION (online)")
    parser.add_argument("--pool", default="", help="online: pool of VERSION (default: default)")
    parser.add_argument("--key", required=True, help="business key")
    parser.add_argument(
        "--policy", default=DEFAULT_POLICY, help="routing policy (default: %(default)s)"
    )
    parser.add_argument("--prompt", help="prompt text, for policies that use prefix history")
    parser.add_argument(
        "--conversation",
        metavar="ID",
        help="conversation id (a Route caller's session_id), for policies that keep "
        "conversations on one member",
    )
    parser.add_argument("--opening", action="store_true", help="the request opens its conversation")
    parser.add_argument("--seed", type=int, default=0, help="policy RNG seed (default: 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=_route)


SUBCOMMANDS: tuple[Register, ...] = (
    _register_build,
    _register_show,
    _register_route,
    plan_online.register,
    plan_diff_cmd.register,
    plan_shadow_cmd.register,
    plan_moves.register,
    plan_auto_cmd.register,
)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan",
        help="build and inspect plans",
        description="Build, inspect and explain routing plans: offline on plan files, online "
        "against a control plane (--target).",
    )
    plan_sub = parser.add_subparsers(dest="plan_command", metavar="SUBCOMMAND", required=True)
    for add in SUBCOMMANDS:
        add(plan_sub)
