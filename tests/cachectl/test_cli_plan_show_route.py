"""``cachectl plan show | route`` offline, and the real console entry in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cachectl.main import main
from dataplane.core.keys import hash_key
from tests.support.plan_cli import build_args, built, rates, run_json

__all__ = ["rates"]  # the fixture

CONSOLE_SCRIPT = Path(sys.executable).with_name("cachectl")


# -- show -------------------------------------------------------------------------------------


def test_show_prints_summary_loads_and_top_keys(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    assert main(["plan", "show", str(out), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert table.version in text
    assert "node-3" in text
    assert "acme/support-bot" in text and "globex/billing" in text
    assert "initech/helpdesk" not in text


def test_show_json_lists_top_keys_with_their_destinations(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    result = run_json(capsys, ["plan", "show", str(out), "--json", "--top", "3"])
    assert result["summary"]["metadata"]["version"] == table.version  # type: ignore[index]
    top = result["top_keys"]
    assert isinstance(top, list) and len(top) == 3
    assert top[0]["key"] == "acme/support-bot"
    assert top[0]["key_hash"] == str(hash_key("acme/support-bot"))
    assert top[0]["node_ids"] == table.destination_ids(hash_key("acme/support-bot"))
    nodes = result["nodes"]
    assert isinstance(nodes, list)
    assert sum(n["planned_load"] for n in nodes) == pytest.approx(81.4)


def test_show_of_something_that_is_not_a_file_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "show", "p0123456789abcdef"]) == 2
    err = capsys.readouterr().err
    assert "p0123456789abcdef: no such plan file" in err
    assert "control-plane" in err


def test_show_rejects_a_corrupt_plan_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plan.bin"
    bad.write_bytes(b"\xff" * 32)
    assert main(["plan", "show", str(bad)]) == 2
    assert f"{bad}: not a valid plan" in capsys.readouterr().err


# -- route ------------------------------------------------------------------------------------


def test_route_sends_a_warm_key_to_a_member_of_its_set(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    result = run_json(capsys, ["plan", "route", str(out), "--key", "globex/billing", "--json"])
    members = table.destination_ids(hash_key("globex/billing"))
    assert result["reason"] == "warm"
    assert result["warm"] is True
    assert result["destinations"] == members
    assert members is not None and result["node"] in members
    assert result["key_hash"] == str(hash_key("globex/billing"))
    assert result["version"] == table.version


def test_route_sends_a_cold_key_to_its_ring_home_by_default(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    result = run_json(capsys, ["plan", "route", str(out), "--key", "tenant-42", "--json"])
    assert (result["policy"], result["reason"]) == ("cacheroute_balanced", "ring")
    assert (result["warm"], result["destinations"]) == (False, None)
    again = run_json(capsys, ["plan", "route", str(out), "--key", "tenant-42", "--json"])
    assert again["node"] == result["node"] and result["node"] in table.node_ids


def test_the_papers_policy_sends_a_cold_key_by_power_of_two_choices(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    argv = ["plan", "route", str(out), "--key", "tenant-42", "--policy", "cacheroute", "--json"]
    result = run_json(capsys, argv)
    assert (result["reason"], result["warm"], result["destinations"]) == ("tail", False, None)
    assert result["node"] in table.node_ids


def test_route_places_a_conversation_on_one_member_of_its_set(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    members = table.destination_ids(hash_key("acme/support-bot"))
    argv = ["plan", "route", str(out), "--key", "acme/support-bot", "--json"]
    nodes = {run_json(capsys, [*argv, "--conversation", f"c{i}"])["node"] for i in range(40)}
    opening = run_json(capsys, [*argv, "--conversation", "c1", "--opening"])
    assert members is not None and nodes == set(members)  # 40 conversations over every member
    assert opening["node"] == run_json(capsys, [*argv, "--conversation", "c1"])["node"]  # idle


def test_route_human_output_names_node_reason_and_set(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = built(rates, tmp_path)
    capsys.readouterr()
    assert main(["plan", "route", str(out), "--key", "acme/support-bot"]) == 0
    text = capsys.readouterr().out
    assert "(warm)" in text
    assert "node-0, node-1, node-2, node-3" in text
    assert f"{hash_key('acme/support-bot')}" in text


def test_route_uses_the_named_policy(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = built(rates, tmp_path)
    capsys.readouterr()
    result = run_json(
        capsys,
        ["plan", "route", str(out), "--key", "acme/support-bot", "--policy", "flat", "--json"],
    )
    assert (result["policy"], result["reason"]) == ("flat", "p2c")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--key", ""), "--key: key is empty"),
        (("--key", "k" * 600), "--key: key is 600 bytes"),
        (("--key", "a", "--policy", "nope"), "--policy: unknown policy 'nope'"),
    ],
    ids=["empty key", "long key", "unknown policy"],
)
def test_route_bad_flags_are_named(
    rates: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    out, _ = built(rates, tmp_path)
    capsys.readouterr()
    assert main(["plan", "route", str(out), *extra]) == 2
    assert message in capsys.readouterr().err


# -- the real console entry -------------------------------------------------------------------


def cachectl(*argv: str) -> subprocess.CompletedProcess[str]:
    command = (
        [str(CONSOLE_SCRIPT)] if CONSOLE_SCRIPT.exists() else [sys.executable, "-m", "cachectl"]
    )
    return subprocess.run(
        [*command, *argv], capture_output=True, text=True, timeout=60, check=False
    )


def test_console_build_show_route_round_trip(rates: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.bin"
    built_run = cachectl(*build_args(rates, out), "--json")
    assert built_run.returncode == 0, built_run.stderr
    version = json.loads(built_run.stdout)["metadata"]["version"]
    shown = cachectl("plan", "show", str(out), "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["summary"]["metadata"]["version"] == version
    routed = cachectl("plan", "route", str(out), "--key", "acme/support-bot", "--json")
    assert routed.returncode == 0 and json.loads(routed.stdout)["reason"] == "warm"


def test_console_bad_rate_exits_2_with_one_line_and_no_file(tmp_path: Path) -> None:
    path = tmp_path / "rates.csv"
    path.write_text("key,rate\na,1\nb,-5\n")
    out = tmp_path / "plan.bin"
    result = subprocess.run(
        [sys.executable, "-m", "cachectl", *build_args(path, out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"cachectl: error: {path}:3: rate '-5' is negative\n"
    assert not out.exists()


def test_console_usage_error_exits_2(tmp_path: Path) -> None:
    result = cachectl("plan", "route", str(tmp_path / "plan.bin"))  # --key missing
    assert result.returncode == 2
    assert "--key" in result.stderr
