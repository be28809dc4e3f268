"""``cachectl load``: replay a workload through ``Route``, or against any OpenAI-compatible server.

Each request of the workload (a simulator generator by name, ``tenants``, or a trace with
``--workload trace --trace PATH``) is either routed by a router (``--router HOST:PORT``,
repeatable: requests go round-robin over them) and then sent, streaming, to the engine the
decision names; or sent as a streamed completion to ``--openai URL`` (the router's HTTP front,
one engine, a vLLM server), with the request's prefix structure in the prompt text and its key
as ``prompt_cache_key`` (:mod:`cachectl.loadgen.openai_client`).
The replay is open loop at ``--qps`` for ``--warmup`` + ``--duration`` seconds; the report covers
the requests after the warm-up (:mod:`cachectl.loadgen.results` defines every number). A terminal
gets a live progress line; ``--json`` prints one object.

With ``--router`` the engines must understand the simulated engine's ``cacheroute`` extension
(``python -m simengine``), which carries each request's prefix blocks and token counts. With
``--openai`` no extension is used: TTFT comes from the stream and the hit rate from
``usage.prompt_tokens_details.cached_tokens`` where the server reports it (vLLM does).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from cachectl.api_key import add_api_key_flags, api_key
from cachectl.errors import CliError
from cachectl.loadgen.client import LoadClient
from cachectl.loadgen.openai_client import OpenAILoadClient
from cachectl.loadgen.progress import ProgressLine
from cachectl.loadgen.results import Outcome, Summary, summarize
from cachectl.loadgen.runner import Sender, replay
from cachectl.loadgen.workloads import NAMES, WorkloadError, parse_options, resolve
from cachectl.output import print_json, print_table
from sim.types import SimRequest

DEFAULT_WORKLOAD = "tenants"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "load",
        help="replay a workload through Route against a running cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--router",
        action="append",
        metavar="HOST:PORT",
        help="router gRPC address (repeatable: requests go round-robin over the routers)",
    )
    target.add_argument(
        "--openai",
        action="append",
        metavar="URL",
        help="base URL of an OpenAI-compatible server (the router's HTTP front, an engine, "
        "vLLM), e.g. http://127.0.0.1:8080 (repeatable: requests go round-robin over them)",
    )
    add_api_key_flags(parser, "--openai")
    add(
        "--workload",
        default=DEFAULT_WORKLOAD,
        help=f"{', '.join(NAMES)} (default: {DEFAULT_WORKLOAD})",
    )
    add("--trace", type=Path, help="trace file for --workload trace (Mooncake or Claude Code)")
    add("--top-k", type=int, help="active set: the top K keys (paper, whales, lowshare, tenants)")
    add(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another workload option, e.g. arrival=gamma (repeatable)",
    )
    add("--qps", type=float, required=True, help="offered load, requests per wall second")
    add("--duration", type=float, required=True, help="measured seconds (after the warm-up)")
    add("--warmup", type=float, default=0.0, help="seconds replayed before measuring (0)")
    add("--seed", type=int, default=1, help="workload seed (1)")
    add("--pool", default="", help="pool to route in (default: default)")
    add("--model", help="model name to send (default: the engine's own)")
    add("--nodes", help="comma-separated destination ids, for the imbalance over all of them")
    add("--request-timeout", type=float, default=120.0, help="seconds per request (120)")
    add("--drain-timeout", type=float, default=60.0, help="seconds to wait for stragglers (60)")
    add(
        "--route-blocks",
        action="store_true",
        help="send the prefix blocks in Route (for the prefix-history policies)",
    )
    add("--json", action="store_true", help="print one JSON object")
    add("--no-progress", action="store_true", help="no live progress line on a terminal")
    parser.set_defaults(handler=_load, group_parser=parser)


def workload_requests(args: argparse.Namespace) -> list[SimRequest]:
    """The stream to replay: ``--warmup`` + ``--duration`` seconds at ``--qps``."""
    for flag, value in (("--qps", args.qps), ("--duration", args.duration)):
        if not (math.isfinite(value) and value > 0):
            raise CliError(f"{flag}: must be > 0, got {value}")
    if not (math.isfinite(args.warmup) and args.warmup >= 0):
        raise CliError(f"--warmup: must be >= 0, got {args.warmup}")
    try:
        options = parse_options(args.option)
        if args.top_k is not None:
            options["top_k"] = args.top_k
        workload = resolve(args.workload, options, args.trace)
        requests = workload.requests(
            qps=args.qps, duration_s=args.warmup + args.duration, seed=args.seed
        )
    except WorkloadError as exc:
        raise CliError(str(exc)) from None
    except (ValueError, OSError) as exc:
        raise CliError(f"--workload {args.workload}: {exc}") from None
    if not requests:
        raise CliError("the workload produced no requests: raise --qps or --duration")
    return requests


async def run(
    args: argparse.Namespace, requests: Sequence[SimRequest]
) -> tuple[list[Outcome], Summary]:
    nodes = [n for n in (args.nodes or "").split(",") if n]
    progress = None
    if not args.no_progress and ProgressLine.enabled():
        progress = ProgressLine("load", args.warmup + args.duration, args.warmup)
    client: OpenAILoadClient | LoadClient
    if args.openai:
        client = OpenAILoadClient(
            args.openai,
            model=args.model,
            api_key=api_key(args),
            pool=args.pool,
            request_timeout_s=args.request_timeout,
        )
    else:
        client = LoadClient(
            args.router,
            pool=args.pool,
            model=args.model,
            request_timeout_s=args.request_timeout,
            route_blocks=args.route_blocks,
        )
    async with client:
        sender: Sender = client
        outcomes = await replay(
            sender,
            requests,
            warmup_s=args.warmup,
            drain_timeout_s=args.drain_timeout,
            progress=progress,
        )
    return outcomes, summarize(outcomes, nodes)


def summary_rows(summary: Summary, *, routed: bool = True) -> list[list[object]]:
    """The table of ``load``; without ``routed`` (``--openai``: no Route call is made, so no
    route latency is measured) the route-latency row is left out rather than shown as zero."""
    rows: list[list[object]] = [
        ["requests (measured)", summary.requests],
        ["completed", summary.completed],
        ["failed", summary.failed],
        ["hit rate (token-weighted)", f"{summary.hit_rate:.1%}"],
        ["TTFT p50", f"{summary.ttft_p50_s:.3f} s"],
        ["TTFT p99", f"{summary.ttft_p99_s:.3f} s"],
        ["throughput", f"{summary.throughput_rps:.2f} req/s"],
        ["output tokens", f"{summary.output_tokens_per_s:.0f} tok/s"],
        ["imbalance (max/mean)", f"{summary.imbalance:.3f}"],
        ["route latency p50/p99", f"{summary.route_p50_ms:.2f} / {summary.route_p99_ms:.2f} ms"],
        ["decisions by reason", _counts(summary.reasons)],
        ["errors", _counts(summary.errors) or "none"],
    ]
    return [row for row in rows if routed or not str(row[0]).startswith("route latency")]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _load(args: argparse.Namespace) -> int:
    requests = workload_requests(args)
    try:
        _, summary = asyncio.run(run(args, requests))
    except (aiohttp.ClientError, OSError, RuntimeError) as exc:
        if not args.openai:
            raise
        raise CliError(f"--openai {' '.join(args.openai)}: {exc}") from None
    if args.json:
        document = {
            "workload": args.workload,
            "qps": args.qps,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "seed": args.seed,
            "routers": args.router or [],
            "openai": args.openai or [],
            **summary.to_dict(),
        }
        if args.openai:  # no Route call was made: no route latency was measured
            document["route_p50_ms"] = document["route_p99_ms"] = None
        print_json(document)
    else:
        print_table(("METRIC", "VALUE"), summary_rows(summary, routed=not args.openai))
        engines = sorted(summary.per_engine.items())
        print()
        print_table(("ENGINE", "REQUESTS"), [[n, c] for n, c in engines])
    if summary.completed == 0:
        print("cachectl: error: no request completed", file=sys.stderr)
        return 1
    return 0
