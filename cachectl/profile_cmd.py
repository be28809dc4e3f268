"""``cachectl profile``: an engine profile fitted to the pool's own Flat-LB telemetry.

    cachectl profile fit                       # the default pool, on llama-3.3-70b-fp8-tp2-h100
    cachectl profile fit --pool a --base qwen3-32b-bf16-tp2-h100
    cachectl profile show [--pool a] [--json]  # the fitted profile and the windows collected

The leader records one Flat-LB window per minute while a pool has no active plan (its rate and
TTFT p50/p99 from the agents' histograms); ``fit`` scales the base profile to those windows
(controlplane/lifecycle/fleet_profile.py) and the shadow gate judges with the result when its fit
quality is within the bound ``show`` prints. A fit replays the sampled trace a few dozen times:
it takes tens of seconds (``--timeout`` is raised to at least 10 minutes for it).
"""

from __future__ import annotations

import argparse
from typing import Any

from cachectl.admin_client import actor, add_target_flags, age_text, connect, to_json
from cachectl.audit_cmd import utc_text
from cachectl.output import print_json, print_table
from cacheroute.v1 import admin_pb2, cluster_pb2

FIT_TIMEOUT_S = 600.0
PROFILE_HEADERS = ("POOL", "NAME", "BASE", "FACTOR", "OFFSET", "RMS ERR", "WINDOWS", "GATE", "AGE")
WINDOW_HEADERS = ("END", "QPS", "P50", "P99", "SAMPLES", "NODES")


def profile_row(profile: cluster_pb2.FleetProfile, used: bool) -> list[object]:
    return [
        profile.pool, profile.name, profile.base, f"{profile.factor:.3f}",
        f"{profile.offset_ms:.1f} ms", f"{profile.rms_relative_error:.1%}", profile.windows,
        "used" if used else "not used", age_text(profile.fitted_at_unix_ms),
    ]  # fmt: skip


def window_rows(windows: list[cluster_pb2.FleetWindow]) -> list[list[object]]:
    return [
        [utc_text(w.end_unix_ms), f"{w.qps:.1f}", f"{w.ttft_p50_s * 1000:.0f} ms",
         f"{w.ttft_p99_s * 1000:.0f} ms", f"{w.samples:.0f}", w.nodes]
        for w in windows
    ]  # fmt: skip


def _fit(args: argparse.Namespace) -> int:
    request = admin_pb2.FitProfileRequest(pool=args.pool, base=args.base, actor=actor(args))
    with connect(args) as client:
        client.timeout_s = max(client.timeout_s, FIT_TIMEOUT_S)  # a fit replays the trace
        fitted = client.call(client.plans.FitProfile, request)
        shown = client.call(client.plans.GetProfile, admin_pb2.GetProfileRequest(pool=args.pool))
    if args.json:
        print_json(to_json(fitted))
        return 0
    print_table(PROFILE_HEADERS, [profile_row(fitted, shown.used_by_gate)])
    if not shown.used_by_gate:
        print(
            f"rms error above the gate's bound {shown.max_rms_relative_error:.0%}: the shadow gate "
            "keeps judging with the built-in profile"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    with connect(args) as client:
        shown = client.call(client.plans.GetProfile, admin_pb2.GetProfileRequest(pool=args.pool))
    if args.json:
        print_json(to_json(shown))
        return 0
    pool = args.pool or "default"
    if shown.HasField("profile"):
        print_table(PROFILE_HEADERS, [profile_row(shown.profile, shown.used_by_gate)])
    else:
        print(f"no profile fitted for pool {pool} (cachectl profile fit)")
    print(f"gate bound: rms relative error <= {shown.max_rms_relative_error:.0%}")
    print()
    if shown.windows:
        print(f"{len(shown.windows)} Flat-LB windows, oldest first:")
        print_table(WINDOW_HEADERS, window_rows(list(shown.windows)))
    else:
        print(f"no Flat-LB windows recorded for pool {pool} yet")
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
        "profile", help="fit an engine profile to the pool's own telemetry", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    profile = group.add_subparsers(dest="profile_command", metavar="SUBCOMMAND", required=True)
    p = _parser(profile, "fit", "fit and store the pool's profile", _fit)
    p.add_argument(
        "--base", default="", metavar="PROFILE",
        help="built-in profile to scale (default: llama-3.3-70b-fp8-tp2-h100)",
    )  # fmt: skip
    _parser(profile, "show", "the fitted profile and the Flat-LB windows collected", _show)
