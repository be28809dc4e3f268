"""``cachectl knee``: the search (doubling, then bisection) on a known threshold, and the command
end to end against a simulated engine over its OpenAI API."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from cachectl.knee_cmd import Probe, search
from sim.capacity import Rung
from sim.engine_model import LLAMA_70B
from simengine.server import EngineOptions, EngineServer


def _threshold(knee: float) -> object:
    async def probe(qps: float, index: int) -> Probe:
        passed = qps <= knee
        return Probe(Rung(qps, 0.1 if passed else 9.0, 0.0), 10, 0.0, passed, False)

    return probe


async def test_the_search_doubles_then_bisects_to_the_highest_passing_rate() -> None:
    found = await search(_threshold(37.0), start=1.0, iterations=4)  # type: ignore[arg-type]
    rates = [p.rung.qps for p in found.probes]
    assert rates == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38]
    assert found.knee_qps == 36 and not found.stopped


async def test_a_first_miss_gives_no_knee_and_a_lagging_client_stops_the_search() -> None:
    none = await search(_threshold(0.5), start=1.0, iterations=4)  # type: ignore[arg-type]
    assert none.knee_qps == 0 and len(none.probes) == 1

    async def lagging(qps: float, index: int) -> Probe:
        return Probe(Rung(qps, 0.1, 0.0), 10, 1.0, True, qps >= 4)

    stopped = await search(lagging, start=1.0, iterations=4)
    assert stopped.knee_qps == 2 and "fell behind at 4" in stopped.stopped


@pytest.mark.slow
async def test_knee_finds_a_simulated_engines_knee_over_its_openai_api() -> None:
    # A 70B engine in real time: with 256-token contexts its knee at p99 TTFT <= 0.5 s is some
    # tens of req/s (64 on an idle machine), and past it queueing, not noise, decides.
    options = EngineOptions(profile=LLAMA_70B.with_overrides(kv_blocks=4000), model="m")
    server = EngineServer("127.0.0.1:0", options)
    await server.start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cachectl", "knee", "--openai", server.url, "--slo", "0.5",
            "--start", "32", "--iterations", "1", "--duration", "2", "--warmup", "0.5",
            "--max-lag", "0.25", "--option", "context_tokens=256", "--top-k", "8",
            "--request-timeout", "60", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 240)
    finally:
        await server.stop()
    doc = json.loads(out)
    if any(p["client_bound"] for p in doc["probes"]):  # a precondition, not the product
        pytest.skip(f"the load generator fell behind on a busy machine: {doc['stopped']}")
    assert process.returncode == 0, err.decode()
    probes = doc["probes"]
    misses = [p for p in probes if not p["passed"]]
    assert misses, "the engine never saturated"
    assert doc["knee_qps"] == max(p["qps"] for p in probes if p["passed"])
    assert all(p["passed"] for p in probes if p["qps"] <= doc["knee_qps"])
    assert all(p["p99_s"] > 0.5 or p["failures"] > 0.05 for p in misses)
