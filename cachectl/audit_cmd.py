"""``cachectl audit``: who did what, when: the control plane's audit trail, filtered.

    cachectl audit                                    # the newest 100 events of every pool
    cachectl audit --pool default --action rollout    # one pool's rollouts
    cachectl audit --by ops-alice --since 2h          # what alice did in the last two hours
    cachectl audit --since 2026-12-01T09:00:00Z --until 2026-12-01T10:00:00Z --json

Times are a duration back from now (``90s``, ``15m``, ``2h``, ``3d``) or an ISO-8601 instant
(``Z`` or an offset; without one, UTC). The table is newest first; ``--json`` prints the events
in the proto3 JSON mapping. ``--by`` matches the recorded actor exactly: the authenticated name
with ``--auth-file``, else the claimed one as ``unverified:NAME`` (``unverified:cachectl:alice``).
"""

from __future__ import annotations

import argparse
import datetime
import re
import time
from typing import Any

from cachectl.admin_client import add_target_flags, age_text, connect, to_json
from cachectl.errors import CliError
from cachectl.output import print_json, print_table
from cacheroute.v1 import admin_pb2, cluster_pb2

HEADERS = ("TIME", "AGE", "POOL", "ACTOR", "ACTION", "FROM", "TO", "GEN", "DETAIL")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_time(flag: str, text: str, now_ms: int) -> int:
    """Unix ms of ``text``: a duration back from ``now_ms`` or an ISO-8601 instant."""
    found = _DURATION.match(text.strip())
    if found:
        return now_ms - round(float(found[1]) * _UNITS[found[2]] * 1000)
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"{flag}: {text!r} is neither a duration (90s, 15m, 2h, 3d) nor an ISO-8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return round(when.timestamp() * 1000)


def utc_text(ms: int) -> str:
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def rows(events: list[cluster_pb2.AuditEvent]) -> list[list[object]]:
    return [
        [
            utc_text(e.at_unix_ms), age_text(e.at_unix_ms), e.pool, e.actor, e.action,
            e.from_version or "-", e.to_version or "-", e.generation or "-", e.detail,
        ]
        for e in events
    ]  # fmt: skip


def _audit(args: argparse.Namespace) -> int:
    now_ms = int(time.time() * 1000)
    if args.limit < 1:
        raise CliError(f"--limit must be >= 1, got {args.limit}")
    request = admin_pb2.ListAuditRequest(
        pool=args.pool or "", actor=args.by or "", action=args.action or "", limit=args.limit
    )
    if args.since:
        request.since_unix_ms = parse_time("--since", args.since, now_ms)
    if args.until:
        request.until_unix_ms = parse_time("--until", args.until, now_ms)
    with connect(args) as client:
        answer = client.call(client.plans.ListAudit, request)
    if args.json:
        print_json(to_json(answer))
        return 0
    if not answer.events:
        print("no audit events match")
        return 0
    print_table(HEADERS, rows(list(answer.events)))
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "audit", help="who did what, when (the audit trail)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--pool", default="", help="one pool (default: every pool)")
    parser.add_argument(
        "--by", metavar="ACTOR", help="only this actor, e.g. cachectl:alice, automatic-mode"
    )
    parser.add_argument(
        "--action", help="only this action: rollout, rollback, disable, shadow, import, ..."
    )
    parser.add_argument("--since", metavar="WHEN", help="from WHEN: 2h (ago) or an ISO-8601 time")
    parser.add_argument("--until", metavar="WHEN", help="before WHEN (same forms)")
    parser.add_argument("--limit", type=int, default=100, help="most events (default: 100)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=_audit)
