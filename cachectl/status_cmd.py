"""`cachectl status`: the store and the leader; per pool, the active version and generation,
how its destinations match the registered nodes, which routers applied it (ACK) or refused it
(NACK, with the reason) and which stopped reporting, node loads and staleness."""

from __future__ import annotations

import argparse
import time
from typing import Any

from cachectl.admin_client import add_target_flags, age_text, connect, to_json
from cachectl.nodes_cmd import HEADERS as NODE_HEADERS
from cachectl.nodes_cmd import node_rows
from cachectl.output import print_json, print_table
from cachectl.plan_auto_cmd import mode_line
from cachectl.plan_text import destinations_line, pointer_line, verdict_text
from cachectl.residency_view import print_residency
from cacheroute.v1 import admin_pb2, cluster_pb2

# Routers re-send their ACK every few seconds (--ack-interval, 5 s): one silent for longer than
# this has stopped (or cannot reach the store).
STALE_ROUTER_MS = 20_000
ROUTER_HEADERS = (
    "ROUTER",
    "ADDRESS",
    "ANSWER",
    "VERSION",
    "GENERATION",
    "SERVING",
    "AGE",
    "REASON",
)


def router_rows(pool: admin_pb2.PoolStatus) -> list[list[object]]:
    rows: list[list[object]] = []
    for ack in pool.routers:
        current = ack.generation == pool.active.generation and ack.version == pool.active.version
        answer = "ACK" if ack.accepted else "NACK"
        if ack.accepted and not current:
            answer = "ACK(old)"
        if ack.accepted and not ack.generation and not ack.version:  # applied nothing yet
            answer = "starting" if pool.active.generation else "no plan"
        rows.append(
            [
                ack.router_id,
                ack.listen_address,
                answer,
                ack.version,
                ack.generation,
                f"{ack.serving_version}@{ack.serving_generation}" if ack.serving_version else "-",
                age_text(ack.at_unix_ms),
                ack.reason,
            ]
        )
    return rows


def guard_line(guard: cluster_pb2.GuardState) -> str:
    phase = cluster_pb2.GuardState.Phase.Name(guard.phase).removeprefix("PHASE_").lower()
    text = f"live guard: {phase}"
    if guard.version:
        text += f" ({guard.version}"
        if guard.action:
            text += f", {guard.action}d"
        text += ")"
    return text + (f": {guard.detail}" if guard.detail else "")


def auto_lines(pool: admin_pb2.PoolStatus) -> list[str]:
    """Automatic mode, the guard and the pool's p99 TTFT (what `status` adds for issue 11)."""
    lines = [mode_line(pool.auto_mode) if pool.HasField("auto_mode") else "automatic mode: off"]
    if pool.HasField("guard"):
        lines.append(guard_line(pool.guard))
    if pool.HasField("p99_ttft_s"):
        source = {
            "engines": "as the engines report it",
            "routers": "measured by the routers: the engines export no TTFT",
        }.get(pool.ttft_source, f"from {pool.ttft_source}" if pool.ttft_source else "")
        lines.append(
            f"p99 TTFT (guard window): {pool.p99_ttft_s:.3f} s over "
            f"{pool.ttft_samples:.0f} requests" + (f" ({source})" if source else "")
        )
    return lines


# What a pool without a plan gets (issue 34: users of the SGLang router or llm-d expect affinity
# from the first request). Routers do not report their policy, so this names the default's
# behaviour and the flag that changes it; docs/operations.md, "Before the first plan".
BEFORE_THE_FIRST_PLAN = (
    "before a plan, routers send every key by their --policy's tail: with the default "
    "(cacheroute_balanced) each key stays on its hash-ring home from the first request, within a "
    "load bound (reason no_table); --policy cacheroute (the paper's dispatch) spreads it by "
    "power-of-two choices on load instead, with no prefix affinity",
    "first plan: cachectl plan build, then plan shadow V and plan rollout V "
    "(or cachectl plan auto enable)",
)


def _print_pool(pool: admin_pb2.PoolStatus) -> None:
    active = pool.active
    pointer = cluster_pb2.ActivePointer()
    pointer.CopyFrom(active)
    pointer.pool = pool.pool
    print(pointer_line(pointer))
    if not active.version:
        for line in BEFORE_THE_FIRST_PLAN:
            print(f"  {line}")
    if pool.HasField("active_destinations"):
        print(f"  {destinations_line(pool.active_destinations)}")
    if active.version:
        v = pool.active_verdict
        text = f"{verdict_text(v)} ({v.summary})" if v.decided_at_unix_ms else "never replayed"
        print(f"  shadow verdict of the active version: {text}")
    if pool.last_verdicts:
        recent = ", ".join(f"{x.version} {verdict_text(x.verdict)}" for x in pool.last_verdicts)
        print(f"  last shadow verdicts: {recent}")
    for line in auto_lines(pool):
        print(f"  {line}")
    if pool.routers:
        acked = sum(
            1
            for a in pool.routers
            if a.accepted and a.generation == active.generation and a.version == active.version
        )
        print(f"  routers: {acked} of {len(pool.routers)} applied generation {active.generation}")
        now_ms = int(time.time() * 1000)
        stale = [a for a in pool.routers if 0 < a.at_unix_ms < now_ms - STALE_ROUTER_MS]
        if stale:
            names = ", ".join(
                f"{a.router_id} ({age_text(a.at_unix_ms, now_ms)} ago)" for a in stale
            )
            print(f"  routers that stopped reporting: {names}")
        print_table(ROUTER_HEADERS, router_rows(pool))
    else:
        print("  routers: none reported")
    if pool.routers_expired:
        print(
            f"  routers silent for more than 5 minutes, not shown: {pool.routers_expired} "
            "(gone; a live router re-appears with its next heartbeat)"
        )
    if pool.nodes:
        print_table(NODE_HEADERS, node_rows(list(pool.nodes)))
        print_residency(list(pool.nodes))
    else:
        print("  nodes: none registered")


def _status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        status = client.call(client.plans.GetStatus, admin_pb2.GetStatusRequest(pool=args.pool))
    if args.json:
        print_json(to_json(status))
        return 0
    leader = status.leader_id or "none"
    print(f"leader: {leader}{' (this instance)' if status.is_leader else ''}")
    if status.store:
        print(f"store: {status.store}")
    if not status.pools:
        print("no pools yet")
    for i, pool in enumerate(status.pools):
        if i:
            print()
        _print_pool(pool)
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "status", help="active plans, router ACK/NACKs, nodes", description=__doc__
    )
    parser.add_argument("--pool", default="", help="one pool (default: every pool)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_target_flags(parser)
    parser.set_defaults(handler=_status)
