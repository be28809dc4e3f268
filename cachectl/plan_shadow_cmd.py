"""``cachectl plan shadow VERSION``: replay a stored version on the control plane, record and
print the verdict.

Every outcome prints the same way: ``verdict: OUTCOME (REASON)``, then the replay's report when
there was one. An ``inconclusive`` verdict (fewer sampled requests than the control plane's
``--shadow-min-samples``, the usual first answer on a small pool) has no report: it is recorded
without a replay, and its reason says what to do. ``--json`` carries ``verdict`` and ``reason``
for every outcome (plus ``version``, ``source``, ``profile``, ``samples`` and the report's fields
when replayed); ``--strict`` exits 1 unless the verdict is ``pass``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cachectl.admin_client import actor as actor_of
from cachectl.admin_client import connect
from cachectl.errors import REFUSED_BY_GATE, CliError
from cachectl.output import print_json
from cachectl.plan_online import subcommand
from cachectl.plan_text import verdict_text
from cachectl.sim_gate_cmd import print_shadow
from cacheroute.v1 import admin_pb2, table_pb2

SHADOW_TIMEOUT_S = 900.0  # plan shadow waits this long at least: the replay runs minutes


def shadow_document(verdict: table_pb2.ShadowVerdict, version: str) -> dict[str, Any]:
    """The answer as one JSON object: the stored report (if replayed) under the verdict's own
    outcome and reason, which every outcome has."""
    document: dict[str, Any] = json.loads(verdict.report_json) if verdict.report_json else {}
    document.update(
        version=version,
        source=verdict.source,
        verdict=verdict_text(verdict),
        reason=verdict.summary,
        profile=verdict.profile,
        samples=verdict.samples,
    )
    return document


def _shadow(args: argparse.Namespace) -> int:
    if args.trace is not None and args.recent is not None:
        raise CliError("--trace and --recent are alternatives: give one")
    if args.recent is not None and args.recent < 1:
        raise CliError(f"--recent must be >= 1 minute, got {args.recent}")
    request = admin_pb2.ShadowPlanRequest(
        pool=args.pool or "", version=args.version, actor=actor_of(args),
        trace_path=str(Path(args.trace).resolve()) if args.trace else "",
        recent_minutes=args.recent or 0, profile=args.profile or "", nodes=args.nodes or 0,
    )  # fmt: skip
    with connect(args) as client:
        client.timeout_s = max(client.timeout_s, SHADOW_TIMEOUT_S)  # a replay takes minutes
        verdict = client.call(client.plans.ShadowPlan, request)
    document = shadow_document(verdict, args.version)
    if args.json:
        print_json(document)
    else:
        print(f"{args.version} on {verdict.source}")
        print_shadow(document)
    passed = verdict.outcome == table_pb2.ShadowVerdict.Outcome.OUTCOME_PASS
    return REFUSED_BY_GATE if args.strict and not passed else 0


def register(sub: Any) -> None:
    """Add ``shadow`` to the ``plan`` group's subparsers."""
    p = subcommand(
        sub, "shadow", "replay a version against Flat-LB and record the verdict", _shadow
    )
    p.add_argument("version", metavar="VERSION")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="a trace file the simulator reads (path as the control plane sees it)",
    )
    p.add_argument(
        "--recent",
        type=int,
        metavar="MINUTES",
        help="the routers' sampled trace of the last MINUTES (default 10)",
    )
    p.add_argument("--profile", help="the pool's engine profile in the simulator (default 70B)")
    p.add_argument("--nodes", type=int, metavar="R", help="default: the plan's destinations")
    p.add_argument("--strict", action="store_true", help="exit 1 unless the verdict is pass")
