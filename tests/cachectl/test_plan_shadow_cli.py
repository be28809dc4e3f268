"""``cachectl plan shadow`` for every outcome (issue 34): an inconclusive verdict, the usual first
answer on a small pool, crashed the command (its document has no replay report) and ``--json``
dropped the outcome and its reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cacheroute.v1 import cluster_pb2
from cacheroute_state import Stores
from dataplane.core.table_codec import encode_table
from tests.support.cli import Cli
from tests.support.factories import small_plan

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


async def test_an_inconclusive_verdict_prints_its_reason_and_json_carries_verdict_and_reason(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    table = small_plan(seed=3)
    path = tmp_path / "plan.pb"
    path.write_bytes(encode_table(table))
    await cli.ok("plan", "import", str(path))
    now = int(time.time() * 1000)
    await stores.telemetry.add_samples([
        cluster_pb2.SampledRequest(
            pool=table.pool, at_unix_ms=now - 1000 * i, key_hash=i + 1, key=f"k{i}",
            prefix_blocks=[i, i + 1],
        )
        for i in range(12)
    ])  # fmt: skip
    shadow = ("plan", "shadow", table.version, "--recent", "5")

    text = await cli.ok(*shadow)
    assert "Traceback" not in text
    verdict = next(line for line in text.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: inconclusive (12 sampled requests, fewer than the 300")
    assert "--trace FILE" in verdict  # the reason says what to do

    document = await cli.json(*shadow)
    assert document["verdict"] == "inconclusive" and document["samples"] == 12
    assert document["reason"] == verdict.removeprefix("verdict: inconclusive (")[:-1]
    assert document["version"] == table.version and "loads" not in document

    code, out, _ = await cli.run(*shadow, "--strict", "--json")
    assert code == 1 and json.loads(out)["verdict"] == "inconclusive"
    listed = await cli.ok("plan", "list")
    assert "inconclusive" in listed.splitlines()[2].split()
