"""One exit-code table for refusals (issue 34): a gate's refusal exits 1 with the same
``cachectl: error:`` line as every other refusal (which exit 2), the table in
docs/operations.md and ``cachectl --help`` say so, and a refused move is in the audit trail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cachectl.errors import INTERRUPTED, REFUSED_BY_GATE, USAGE_OR_REFUSED
from cachectl.main import build_parser
from cacheroute_state import Stores
from dataplane.core.table_codec import encode_table
from tests.support.cli import ROOT, Cli
from tests.support.factories import small_plan

pytestmark = pytest.mark.grpc


@pytest.fixture
def stores(state_stores: Stores) -> Stores:
    return state_stores


def test_the_docs_table_and_the_help_name_every_exit_code() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Exit codes") :]
    section = section[: section.index("\n## ")]
    rows = re.findall(r"^\| (\d+) \|", section, re.M)
    assert rows == ["0", str(REFUSED_BY_GATE), str(USAGE_OR_REFUSED), str(INTERRUPTED)]
    epilog = build_parser(only="").epilog or ""
    for code in (REFUSED_BY_GATE, USAGE_OR_REFUSED, INTERRUPTED):
        assert f"; {code} " in epilog or f": 0 done; {code} " in epilog


async def test_a_gate_refusal_exits_1_with_an_error_line_and_is_audited(
    cli: Cli, stores: Stores, tmp_path: Path
) -> None:
    table = small_plan(seed=9)
    path = tmp_path / "plan.pb"
    path.write_bytes(encode_table(table))
    await cli.ok("plan", "import", str(path))
    code, _, err = await cli.run("plan", "rollout", table.version, "--reason", "first try")
    assert code == REFUSED_BY_GATE
    lines = err.splitlines()
    assert lines[0].startswith("cachectl: error: FAILED_PRECONDITION: ")
    assert lines[1].startswith("refused by: destinations, shadow")
    audit = await cli.json("audit", "--action", "rollout_refused")
    [event] = audit["events"]
    assert event["to_version"] == table.version and event["actor"] == "unverified:tester"
    assert event["detail"].startswith("first try; refused by destinations: ")
    assert "shadow: " in event["detail"]
    # Any other refusal: exit 2, one line.
    assert "NOT_FOUND" in await cli.refused("plan", "rollout", "p0123456789abcdef")
    code, _, err = await cli.run("plan", "rollback")
    assert code == USAGE_OR_REFUSED and err.startswith("cachectl: error: ")
