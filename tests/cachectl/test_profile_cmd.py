"""``cachectl profile show|fit`` against a control plane on the state twin: aligned tables, the
gate's bound, ``--json`` in the proto3 JSON mapping, and a typed refusal with too few windows."""

from __future__ import annotations

import time

from cacheroute_state import Stores
from sim.engine_model import LLAMA_70B
from sim.workloads.registry import make_workload
from tests.support.cli import Cli
from tests.support.fleet import record_flat_windows, sampled

PAPER = make_workload("paper")


async def telemetry(stores: Stores, rates: tuple[float, ...]) -> None:
    truth = LLAMA_70B.slowed(1.3, 20.0, name="truth", note="")
    served = {qps: PAPER.requests(qps=qps, duration_s=20.0, seed=1) for qps in rates}
    await record_flat_windows(stores, "default", truth, 2, served)
    trace = PAPER.requests(qps=8.0, duration_s=20.0, seed=2)
    await stores.telemetry.add_samples(sampled("default", trace, int(time.time() * 1000) - 30_000))


async def test_show_lists_the_windows_and_fit_prints_and_stores_the_profile(
    cli: Cli, state_stores: Stores
) -> None:
    await state_stores.plans.add_pool("default")
    await telemetry(state_stores, (4.0, 8.0, 12.0))
    out = await cli.ok("profile", "show")
    assert "no profile fitted for pool default (cachectl profile fit)" in out
    assert "gate bound: rms relative error <= 15%" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("END"))
    assert header.split() == ["END", "QPS", "P50", "P99", "SAMPLES", "NODES"]
    rows = lines[lines.index(header) + 1 :]
    assert len(rows) == 3 and [r.split()[1] for r in rows] == ["4.0", "8.0", "12.0"]
    assert len({len(r) for r in [header, *rows]}) <= 2  # aligned columns (trailing pad aside)

    out = await cli.ok("profile", "fit")
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["POOL", "NAME", "BASE", "FACTOR"]
    assert row.split()[0] == "default" and row.split()[1].startswith("fitted:default@")
    assert header.index("FACTOR") == row.index(row.split()[3])  # the column lines up

    shown = await cli.json("profile", "show")
    stored = await state_stores.telemetry.get_fleet_profile("default")
    assert stored is not None
    assert shown["profile"]["name"] == stored.name and shown["profile"]["factor"] == stored.factor
    assert (
        shown["profile"]["base"] == LLAMA_70B.name
        and shown["profile"]["fitted_by"] == "unverified:tester"
    )
    assert len(shown["windows"]) == 3 and shown["max_rms_relative_error"] == 0.15
    assert shown["used_by_gate"] == (stored.rms_relative_error <= 0.15)
    fitted = await cli.json("profile", "fit")
    assert fitted["windows"] == 3 and fitted["pool"] == "default"


async def test_fit_with_too_few_windows_is_refused_naming_held_and_needed(
    cli: Cli, state_stores: Stores
) -> None:
    await state_stores.plans.add_pool("default")
    await telemetry(state_stores, (4.0,))
    line = await cli.refused("profile", "fit")
    assert "has 1 Flat-LB windows; a fit needs at least 3" in line
    line = await cli.refused("profile", "fit", "--base", "gpt-9")
    assert "gpt-9" in line
