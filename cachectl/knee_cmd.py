"""``cachectl knee``: one engine's knee with the load generator, the number to set ``q_cap`` from.

    cachectl knee --openai http://gpu-0:8000 --slo 3.5 --workload tenants --duration 30

``q_cap`` is the per-destination rate one key's replica may carry (docs/real-engines.md); the
simulator measures it as a single destination's SLO knee (:func:`sim.calibration
.single_destination_knee`), and this command measures the same thing on a live engine: it
replays the workload straight to the engine (``cachectl load --openai``'s client) at a rate that
doubles from ``--start`` until a probe misses the SLO (p99 TTFT above ``--slo`` or more than 5%
failed, :class:`sim.capacity.Rung`), then bisects ``--iterations`` times between the last pass
and the first miss. The knee is the highest passing rate. Each probe lasts ``--warmup`` +
``--duration`` seconds, with a fresh workload seed, so later probes do not find earlier ones'
prompts cached beyond what the workload itself repeats.

The load generator must outpace the engine: a probe whose own schedule lag (p99) exceeds
``--max-lag`` measured the client, not the engine, so the search stops there and says so (run it
from a less busy machine, or with a smaller ``--duration``). Point it at one engine directly,
never at the router: the knee is one destination's.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from cachectl.api_key import add_api_key_flags, api_key
from cachectl.errors import CliError
from cachectl.loadgen.openai_client import OpenAILoadClient
from cachectl.loadgen.results import summarize
from cachectl.loadgen.runner import replay
from cachectl.loadgen.workloads import NAMES, WorkloadError, parse_options, resolve
from cachectl.output import print_json, print_table
from sim.capacity import MAX_FAILURES, Rung

MAX_QPS = 10_000.0


@dataclass(frozen=True)
class Probe:
    rung: Rung
    completed: int
    lag_p99_s: float
    passed: bool
    client_bound: bool


@dataclass(frozen=True)
class KneeSearch:
    knee_qps: float  # 0: even the first probe missed
    probes: tuple[Probe, ...]
    stopped: str  # why the search ended early ("" when it ran to the end)


async def search(
    probe: Callable[[float, int], Awaitable[Probe]], *, start: float, iterations: int
) -> KneeSearch:
    """Double from ``start`` until a probe fails, then bisect (module docstring)."""
    probes: list[Probe] = []

    async def run(qps: float) -> Probe | None:
        result = await probe(qps, len(probes))
        probes.append(result)
        return None if result.client_bound else result

    low, high = 0.0, start
    while True:
        result = await run(high)
        if result is None:
            return KneeSearch(low, tuple(probes), f"the load generator fell behind at {high:g}")
        if not result.passed:
            break
        low, high = high, high * 2
        if high > MAX_QPS:
            return KneeSearch(low, tuple(probes), f"no knee below {MAX_QPS:g} req/s")
    for _ in range(iterations if low > 0 else 0):
        middle = (low + high) / 2
        result = await run(middle)
        if result is None:
            return KneeSearch(low, tuple(probes), f"the load generator fell behind at {middle:g}")
        low, high = (middle, high) if result.passed else (low, middle)
    return KneeSearch(low, tuple(probes), "")


def _workload(args: argparse.Namespace) -> Any:
    try:
        options = parse_options(args.option)
        if args.top_k is not None:
            options["top_k"] = args.top_k
        return resolve(args.workload, options, None)
    except WorkloadError as exc:
        raise CliError(str(exc)) from None
    except ValueError as exc:
        raise CliError(f"--workload {args.workload}: {exc}") from None


async def _probe(args: argparse.Namespace, workload: Any, qps: float, index: int) -> Probe:
    requests = workload.requests(
        qps=qps, duration_s=args.warmup + args.duration, seed=args.seed + index
    )
    client = OpenAILoadClient(
        args.openai, model=args.model, api_key=api_key(args), request_timeout_s=args.request_timeout
    )
    async with client:
        outcomes = await replay(
            client, requests, warmup_s=args.warmup, drain_timeout_s=args.request_timeout
        )
    summary = summarize(outcomes)
    failures = summary.failed / summary.requests if summary.requests else 1.0
    rung = Rung(qps=qps, p99_s=summary.ttft_p99_s, failures=failures)
    lagging = summary.schedule_lag_p99_s > args.max_lag
    return Probe(
        rung, summary.completed, summary.schedule_lag_p99_s, rung.passes(args.slo), lagging
    )


def _rows(found: KneeSearch) -> list[list[object]]:
    return [
        [
            round(p.rung.qps, 3), p.completed, round(p.rung.p99_s, 4),
            f"{p.rung.failures:.1%}", round(p.lag_p99_s, 4),
            "client-bound" if p.client_bound else ("pass" if p.passed else "miss"),
        ]
        for p in found.probes
    ]  # fmt: skip


def _knee(args: argparse.Namespace) -> int:
    for flag, value in (
        ("--slo", args.slo),
        ("--start", args.start),
        ("--duration", args.duration),
    ):
        if not (math.isfinite(value) and value > 0):
            raise CliError(f"{flag}: must be > 0, got {value}")
    if args.iterations < 0:
        raise CliError(f"--iterations: must be >= 0, got {args.iterations}")
    workload = _workload(args)
    try:
        found = asyncio.run(
            search(
                lambda qps, i: _probe(args, workload, qps, i),
                start=args.start,
                iterations=args.iterations,
            )
        )
    except (aiohttp.ClientError, OSError, RuntimeError) as exc:
        raise CliError(f"--openai {args.openai}: {exc}") from None
    if args.json:
        print_json(
            {
                "openai": args.openai, "slo_s": args.slo, "knee_qps": found.knee_qps,
                "stopped": found.stopped, "max_failures": MAX_FAILURES,
                "probes": [
                    {"qps": p.rung.qps, "p99_s": p.rung.p99_s, "failures": p.rung.failures,
                     "completed": p.completed, "schedule_lag_p99_s": p.lag_p99_s,
                     "passed": p.passed, "client_bound": p.client_bound}
                    for p in found.probes
                ],
            }
        )  # fmt: skip
    else:
        print_table(
            ("QPS", "COMPLETED", "P99_TTFT_S", "FAILED", "LAG_P99_S", "RESULT"), _rows(found)
        )
        if found.knee_qps > 0:
            print(
                f"knee: {found.knee_qps:.3g} req/s at p99 TTFT <= {args.slo:g} s "
                f"(--q-cap for this engine's pool: about {found.knee_qps:.3g})"
            )
        else:
            print(f"no knee: the first probe ({args.start:g} req/s) already missed; lower --start")
        if found.stopped:
            print(f"stopped early: {found.stopped}")
    if found.knee_qps == 0 or found.stopped:
        print("cachectl: the knee search did not finish cleanly", file=sys.stderr)
        return 1
    return 0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "knee", help="find one engine's knee (its q_cap) with the load generator",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add = parser.add_argument
    add("--openai", required=True, metavar="URL", help="one engine's OpenAI-compatible base URL")
    add_api_key_flags(parser, "--openai")
    add("--model", help="model name to send (default: the engine's own)")
    add("--slo", type=float, default=3.5, help="p99 TTFT bound, seconds (default: 3.5)")
    add("--start", type=float, default=1.0, help="first probe's rate, req/s (default: 1)")
    add("--iterations", type=int, default=4, help="bisection steps (default: 4)")
    add("--duration", type=float, default=30.0, help="measured seconds per probe (default: 30)")
    add("--warmup", type=float, default=5.0, help="seconds per probe before measuring (5)")
    add("--max-lag", type=float, default=0.05,
        help="load generator's own p99 schedule lag above which a probe measured the client, "
             "not the engine (default: 0.05 s)")  # fmt: skip
    add("--workload", default="tenants", help=f"{', '.join(NAMES)} (default: tenants)")
    add("--top-k", type=int, help="active set: the top K keys")
    add("--option", action="append", default=[], metavar="NAME=VALUE",
        help="another workload option (repeatable)")  # fmt: skip
    add("--seed", type=int, default=1, help="first probe's workload seed (1)")
    add("--request-timeout", type=float, default=120.0, help="seconds per request (120)")
    add("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_knee)
