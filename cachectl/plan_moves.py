"""``cachectl plan rollout | rollback | disable``: move a pool's active pointer.

Every move is one compare-and-set through the control plane's gates (issue 24): a refusal comes
back as typed ``ActivationRefused`` details, printed as the gates that said no and the
``--skip-gate`` that would go past each; a refusal exits 1 (a decision), a usage error or any
other refusal 2 (:data:`cachectl.errors.EXIT_CODES`, docs/operations.md "Exit codes").
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cachectl.admin_client import AdminError, connect, to_json
from cachectl.admin_client import actor as actor_of
from cachectl.errors import REFUSED_BY_GATE, CliError
from cachectl.output import print_json
from cachectl.plan_online import subcommand
from cachectl.plan_text import destinations_line, pointer_line
from cacheroute.v1 import admin_pb2, cluster_pb2


def _print_pointer(args: argparse.Namespace, pointer: cluster_pb2.ActivePointer) -> int:
    if args.json:
        print_json(to_json(pointer))
    else:
        print(pointer_line(pointer))
    return 0


def _skips(args: argparse.Namespace) -> list[str]:
    """``--skip-gate`` names (the server checks them against its gates); ``--force`` is gone."""
    if getattr(args, "force", False):
        raise CliError(
            "--force is gone: name the gates to go past, e.g. --skip-gate shadow --reason TEXT "
            "(gates: destinations, shadow; each skip is recorded in the audit)"
        )
    skips: list[str] = list(args.skip_gate or [])
    if skips and not (args.reason or "").strip():
        raise CliError("--skip-gate needs --reason TEXT (the audit records why)")
    return skips


def _moved(
    args: argparse.Namespace, client: Any, method: Any, request: Any
) -> cluster_pb2.ActivePointer | None:
    """The pointer after a move, or None when gates refused it: their typed refusal (read from
    the status details, never the message) is printed, as JSON on stdout with ``--json``."""
    try:
        pointer: cluster_pb2.ActivePointer = client.call(method, request)
    except AdminError as exc:
        refused = exc.detail(admin_pb2.ActivationRefused)
        if refused is None:
            raise
        if args.json:
            print_json({"refused": to_json(refused)})
        print(f"cachectl: error: {exc}", file=sys.stderr)
        gates = " ".join(f"--skip-gate {r.gate}" for r in refused.refusals)
        print(
            f"refused by: {', '.join(r.gate for r in refused.refusals)} ({gates})", file=sys.stderr
        )
        return None  # the gates said no: a decision, not a usage error (REFUSED_BY_GATE)
    return pointer


def _rollout(args: argparse.Namespace) -> int:
    request = admin_pb2.RolloutRequest(
        pool=args.pool or "", version=args.version, actor=actor_of(args), reason=args.reason or ""
    )
    request.skip_gates.extend(_skips(args))
    if args.expect_generation is not None:
        request.expected_generation = args.expect_generation
    with connect(args) as client:
        pointer = _moved(args, client, client.plans.Rollout, request)
        if pointer is None:
            return REFUSED_BY_GATE
        try:
            shown = client.call(
                client.plans.GetPlan,
                admin_pb2.GetPlanRequest(pool=pointer.pool, version=pointer.version, top_keys=1),
            )
            check: admin_pb2.DestinationCheck | None = shown.summary.destinations
        except AdminError:  # rolled out but not readable: the routers will NACK it
            check = None
    if args.json:
        print_json({**to_json(pointer), "destinations": to_json(check) if check else None})
        return 0
    print(pointer_line(pointer))
    print(destinations_line(check) if check else "destinations: not checked (plan unreadable)")
    return 0


def _disable(args: argparse.Namespace) -> int:
    request = admin_pb2.DisablePlanRequest(
        pool=args.pool or "", actor=actor_of(args), reason=args.reason or ""
    )
    if args.expect_generation is not None:
        request.expected_generation = args.expect_generation
    with connect(args) as client:
        return _print_pointer(args, client.call(client.plans.DisablePlan, request))


def _rollback(args: argparse.Namespace) -> int:
    request = admin_pb2.RollbackRequest(
        pool=args.pool or "", to_version=args.to or "", actor=actor_of(args)
    )
    request.reason = args.reason or ""
    request.skip_gates.extend(_skips(args))
    if args.expect_generation is not None:
        request.expected_generation = args.expect_generation
    with connect(args) as client:
        pointer = _moved(args, client, client.plans.Rollback, request)
    return REFUSED_BY_GATE if pointer is None else _print_pointer(args, pointer)


def _generation(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def register(sub: Any) -> None:
    """Add ``rollout``, ``rollback`` and ``disable`` to the ``plan`` group's subparsers."""
    for name, help_text, handler in (
        ("rollout", "make a stored version active (compare-and-set)", _rollout),
        ("rollback", "re-activate an earlier version under a new generation", _rollback),
        (
            "disable",
            "turn planned routing off: a new generation with no table (Flat-LB, no_table); "
            "`plan rollback` restores the last plan",
            _disable,
        ),
    ):
        p = subcommand(sub, name, help_text, handler)
        if name == "rollout":
            p.add_argument("version", metavar="VERSION", help="plan version (p + 16 hex digits)")
        elif name == "rollback":
            p.add_argument("--to", metavar="VERSION", help="default: the previous active one")
        if name in ("rollout", "rollback"):
            p.add_argument(
                "--skip-gate", action="append", metavar="GATE",
                help="go past this gate although it refuses: destinations (warm destinations "
                "that are not registered nodes) or shadow (no passing shadow verdict); "
                "repeatable, needs --reason, recorded in the audit with the actor",
            )  # fmt: skip
            p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
        p.add_argument(
            "--expect-generation", type=_generation, metavar="G",
            help="apply only if the active generation is still G (default: as read just before)",
        )  # fmt: skip
        p.add_argument("--reason", help="recorded in the audit trail")
