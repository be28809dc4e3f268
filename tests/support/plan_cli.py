"""The offline ``cachectl plan`` tests' shared inputs: a rates file and the build command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachectl.main import main
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import decode_table

__all__ = ["RATES", "build_args", "built", "rates", "run_json"]

RATES = """key,rate
acme/support-bot,42.0
globex/billing,18.5
initech/helpdesk,9.0
umbrella/triage,6.0
hooli/search,3.2
tenant-42,1.5
soylent/faq,0.8
wayne/legal,0.4
"""


@pytest.fixture
def rates(tmp_path: Path) -> Path:
    path = tmp_path / "rates.csv"
    path.write_text(RATES)
    return path


def build_args(rates: Path, out: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "build",
        "--rates",
        str(rates),
        "--num-nodes",
        "4",
        "--q-cap",
        "10",
        "--slots-per-node",
        "2",
        "--out",
        str(out),
        *extra,
    ]


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, "--json prints exactly one line"
    result: dict[str, object] = json.loads(out)
    return result


def built(rates: Path, tmp_path: Path, *extra: str) -> tuple[Path, RoutingTable]:
    out = tmp_path / "plan.bin"
    assert main([*build_args(rates, out, *extra), "--json"]) == 0
    return out, decode_table(out.read_bytes())
