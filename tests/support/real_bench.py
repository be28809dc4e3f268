"""The real-engine routing benchmark's procedure, shared by ``bench/bench_real_engine.py`` and its
CI test (``tests/system/test_real_engine_routing.py``).

1. Warm-up: ``warmup_s`` of the workload through the first router, so the routers report live
   key rates; then a plan is built from them (``slots_per_node`` = the engines' slots) and rolled
   out to every router (policies that read plans use it; the others ignore it).
2. ``repeats`` rounds; each round runs every arm once, the order rotated by one each round so no
   arm always follows the same one. An arm is a router policy (its router's HTTP front) or
   ``direct`` (round-robin over the engines, no router). Every run has its own salt (cold
   caches) and the same schedule seed within a round, so arms of a round see the same requests.
3. Per run: the engines' own prompt counters before and after (the cross-check of the clients'
   ``cached_tokens``), the load average before and after; the fleet must be idle between runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Sequence

from tests.support.llamacpp import metrics_page, prompt_counters
from tests.support.real_fleet import RealFleet
from tests.support.real_workload import (
    Answer,
    RunSummary,
    Workload,
    schedule,
    send_all,
    summarise,
)

DIRECT = "direct"


def _check(answers: list[Answer]) -> list[Answer]:
    """The answers, unless most failed: a set-up error (e.g. prompts longer than a slot), not a
    measurement."""
    failed = [a for a in answers if not a.ok]
    if len(failed) > len(answers) // 2:
        raise RuntimeError(f"{len(failed)} of {len(answers)} requests failed: {failed[0].error}")
    return answers


def _counters(fleet: RealFleet) -> tuple[float, float]:
    cached = processed = 0.0
    for address in fleet.engine_addresses.values():
        c, p = prompt_counters(address)
        cached, processed = cached + c, processed + p
    return cached, processed


def _busy(fleet: RealFleet) -> float:
    busy = 0.0
    for address in fleet.engine_addresses.values():
        for line in metrics_page(address).splitlines():
            name, _, value = line.partition(" ")
            if name in ("llamacpp:requests_processing", "llamacpp:requests_deferred"):
                busy += float(value)
    return busy


async def wait_idle(fleet: RealFleet, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(_busy, fleet) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the engines stayed busy between runs")
        await asyncio.sleep(0.2)


async def run_arm(
    fleet: RealFleet, arm: str, repeat: int, workload: Workload, salt: str, seed: int,
    timeout_s: float,
) -> RunSummary:  # fmt: skip
    """One measured run of one arm (module docstring, step 3)."""
    fleet.check_alive()
    await wait_idle(fleet, timeout_s)
    targets = (
        [f"http://{a}" for a in fleet.engine_addresses.values()]
        if arm == DIRECT
        else [fleet.router_urls[arm]]
    )
    requests = schedule(workload, salt, seed)
    before, load_before = await asyncio.to_thread(_counters, fleet), os.getloadavg()[0]
    answers = _check(await send_all(requests, targets, workload, timeout_s))
    await wait_idle(fleet, timeout_s)
    after, load_after = await asyncio.to_thread(_counters, fleet), os.getloadavg()[0]
    delta = (after[0] - before[0], after[1] - before[1])
    return summarise(arm, repeat, answers, delta, (load_before, load_after))


async def run_benchmark(
    fleet: RealFleet,
    arms: Sequence[str],
    workload: Workload,
    *,
    repeats: int,
    warmup_s: float,
    seed: int,
    timeout_s: float = 600.0,
    say: Callable[[str], None] = lambda _: None,
) -> list[RunSummary]:
    """Warm up, plan, then the interleaved repeats (module docstring); every run's summary."""
    routers = [a for a in arms if a != DIRECT]
    if routers:
        warm = dataclasses.replace(workload, requests=max(1, round(warmup_s * workload.rate_per_s)))
        say(f"warm-up: {warm.requests} requests through router-{routers[0]} for live rates")
        first = [fleet.router_urls[routers[0]]]
        _check(await send_all(schedule(warm, f"warm{seed}", seed), first, warm, timeout_s))
        await asyncio.sleep(3.0)  # two traffic reports and a rate update
        built = await fleet.plan(fleet.spec.slots, routers)
        say(f"plan {built.metadata.version} rolled out to {len(routers)} routers")
    results: list[RunSummary] = []
    for repeat in range(repeats):
        order = [arms[(i + repeat) % len(arms)] for i in range(len(arms))]
        for arm in order:
            salt = f"s{seed}r{repeat}{arm}"
            summary = await run_arm(fleet, arm, repeat, workload, salt, seed + repeat, timeout_s)
            say(
                f"repeat {repeat} {arm}: cached {summary.cached_share:.1%} (engines "
                f"{summary.engine_share:.1%}), TTFT p50 {summary.ttft_p50_s:.2f} s p99 "
                f"{summary.ttft_p99_s:.2f} s, lag p99 {summary.lag_p99_s:.2f} s, load "
                f"{summary.load_before:.1f}, failed {summary.failed}"
            )
            results.append(summary)
    return results
