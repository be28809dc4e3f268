"""``cachectl plan build | show | route`` offline: output, the plan file, and bad input.

A few tests run the real console entry in a subprocess; the rest call ``main()`` in process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cachectl.main import main
from dataplane.core.keys import hash_key
from dataplane.core.table import RoutingTable
from dataplane.core.table_codec import decode_table

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
BUILD_JSON_FIELDS = {"metadata", "active", "out"}  # the control plane's PlanSummary, and --out
STATS_JSON_FIELDS = {
    "num_keys",
    "admitted_keys",
    "admitted_rate_share",
    "planned_imbalance",
    "build_ms",
    "slots_used",
    "slots_total",
    "max_replicas",
    "tail_rate",
}
CONSOLE_SCRIPT = Path(sys.executable).with_name("cachectl")


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


# -- build ------------------------------------------------------------------------------------


def test_build_writes_a_valid_plan_and_prints_a_summary(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.bin"
    assert main(build_args(rates, out)) == 0
    table = decode_table(out.read_bytes())
    text = capsys.readouterr().out
    assert f"wrote plan {table.version} to {out}" in text
    assert "4 admitted" in text and "imbalance" in text
    assert table.node_ids == ("node-0", "node-1", "node-2", "node-3")
    assert (table.stats.num_keys, table.stats.admitted_keys) == (8, 4)
    assert table.stats.slots_used <= 8


def test_build_json_is_one_object_describing_the_written_plan(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.bin"
    result = run_json(capsys, [*build_args(rates, out), "--json"])
    assert result.keys() >= BUILD_JSON_FIELDS
    table = decode_table(out.read_bytes())
    meta = result["metadata"]
    assert isinstance(meta, dict) and meta["stats"].keys() >= STATS_JSON_FIELDS
    assert meta["version"] == table.version
    assert meta["content_hash"] == table.content_hash
    assert meta["created_at_unix_ms"] == str(table.created_at_unix_ms)  # 64-bit: a string
    assert result["out"] == str(out) and result["active"] is False
    assert "bytes" not in result  # the size is said once (issue 34): metadata.table_bytes
    assert meta["table_bytes"] == str(out.stat().st_size)
    assert (meta["stats"]["num_keys"], meta["stats"]["admitted_keys"]) == ("8", "4")
    assert meta["stats"]["admitted_rate_share"] == pytest.approx(75.5 / 81.4)
    assert meta["stats"]["slots_total"] == "8"


def test_top_keys_keep_their_text_labels(rates: Path, tmp_path: Path) -> None:
    _, table = built(rates, tmp_path)
    assert [k.key for k in table.top_keys] == [
        "acme/support-bot",
        "globex/billing",
        "initech/helpdesk",
        "umbrella/triage",
    ]
    assert table.top_keys[0].key_hash == hash_key("acme/support-bot")


def test_num_nodes_names_destinations_node_0_to_n_minus_1(rates: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.bin"
    argv = build_args(rates, out)
    argv[argv.index("--num-nodes") + 1] = "2"
    assert main([*argv, "--json"]) == 0
    assert decode_table(out.read_bytes()).node_ids == ("node-0", "node-1")


def test_explicit_node_ids_and_weights_are_recorded(rates: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.bin"
    argv = build_args(rates, out)
    at = argv.index("--num-nodes")
    argv[at : at + 2] = ["--nodes", "gpu-a, gpu-b,gpu-c"]
    assert main([*argv, "--weights", "1,2,1", "--pool", "eu", "--json"]) == 0
    table = decode_table(out.read_bytes())
    assert table.node_ids == ("gpu-a", "gpu-b", "gpu-c")
    assert table.params.node_weights == (1.0, 2.0, 1.0)
    assert table.pool == "eu"


def test_same_rates_in_another_order_give_the_same_plan(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, *lines = RATES.splitlines()
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text("\n".join([header, *reversed(lines)]) + "\n")
    first = run_json(capsys, [*build_args(rates, tmp_path / "a.bin"), "--json"])
    second = run_json(capsys, [*build_args(shuffled, tmp_path / "b.bin"), "--json"])
    assert first["metadata"]["content_hash"] == second["metadata"]["content_hash"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("extra", "placement", "seed"),
    [
        ((), "lpt", 0),
        (("--placement", "hash"), "hash", 0),
        (("--placement", "random"), "random", 0),
        (("--placement", "random", "--seed", "7"), "random", 7),
    ],
)
def test_placement_and_seed_are_recorded(
    rates: Path, tmp_path: Path, extra: tuple[str, ...], placement: str, seed: int
) -> None:
    _, table = built(rates, tmp_path, *extra)
    assert (table.params.placement, table.params.seed) == (placement, seed)


def test_build_replaces_an_existing_plan_and_leaves_no_temporary_file(
    rates: Path, tmp_path: Path
) -> None:
    out = tmp_path / "plan.bin"
    out.write_bytes(b"old")
    assert main([*build_args(rates, out), "--json"]) == 0
    decode_table(out.read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.bin", "rates.csv"]


def test_build_without_rates_says_rates_are_required_until_the_control_plane_lands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["plan", "build", "--num-nodes", "2", "--q-cap", "1", "--slots-per-node", "1"])
    assert code == 2
    assert "--rates is required" in capsys.readouterr().err


# -- bad input --------------------------------------------------------------------------------

BAD_FILES = [
    ("negative rate", "key,rate\na,1\nb,-2\n", "rates.csv:3: rate '-2' is negative"),
    ("non-numeric rate", "key,rate\na,1\nb,lots\n", "rates.csv:3: rate 'lots' is not a number"),
    ("nan rate", "key,rate\na,nan\n", "rates.csv:2: rate 'nan' is not finite"),
    ("inf rate", "key,rate\na,1\nb,-inf\n", "rates.csv:3: rate '-inf' is not finite"),
    (
        "duplicate key",
        "key,rate\na,1\nb,2\na,3\n",
        "rates.csv:4: duplicate key 'a' (also on line 2)",
    ),
    ("empty file", "", "rates.csv: file is empty"),
    ("header only", "key,rate\n", "rates.csv: no keys after the 'key,rate' header"),
    ("missing header", "a,1\nb,2\n", "rates.csv:1: missing header"),
    ("wrong columns", "name,qps\na,1\n", "rates.csv:1: header must be 'key,rate'"),
    ("extra column", "key,rate,owner\na,1,x\n", "rates.csv:1: header must be 'key,rate'"),
    ("row with 3 fields", "key,rate\na,1,x\n", "rates.csv:2: expected 2 fields"),
    ("empty key", "key,rate\n,1\n", "rates.csv:2: key is empty"),
    ("key over 512 bytes", f"key,rate\n{'k' * 513},1\n", "rates.csv:2: key is 513 bytes"),
    # Issue 34: each of these used to plan a key no caller sends, silently.
    ("spaces around a key", "key,rate\na,1\n acme ,5\n", "rates.csv:3: key ' acme ' has spaces"),
    ("spaces around a rate", "key,rate\nacme, 5\n", "rates.csv:2: rate ' 5' has spaces"),
    ("underscores in a rate", "key,rate\na,1_000\n", "rates.csv:2: rate '1_000' is not a plain"),
    ("hex rate", "key,rate\na,0x10\n", "rates.csv:2: rate '0x10' is not a number"),
    (
        "a comment line",
        "key,rate\n#top tenants,1\na,2\n",
        "rates.csv:2: key '#top tenants' starts with '#'",
    ),
    ("a derived key", "key,rate\n~d1.00ff,3\n", "rates.csv:2: key '~d1.00ff' starts with '~'"),
]


@pytest.mark.parametrize(
    ("content", "message"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES]
)
def test_bad_rates_file_fails_with_one_line_naming_the_line_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "rates.csv"
    path.write_text(content)
    out = tmp_path / "plan.bin"
    assert main(build_args(path, out)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("cachectl: error: ")
    assert captured.err.count("\n") == 1
    assert message in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rates.csv"]


def test_non_utf8_rates_file_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rates.csv"
    path.write_bytes(b"key,rate\na,1\n\xff\xfe,2\n")
    assert main(build_args(path, tmp_path / "plan.bin")) == 2
    assert "rates.csv:3: not valid UTF-8" in capsys.readouterr().err


BAD_FLAGS = [
    ("--num-nodes", "0", "--num-nodes must be between 1 and 65535, got 0"),
    ("--q-cap", "0", "--q-cap must be a positive number"),
    ("--q-cap", "-3", "--q-cap must be a positive number"),
    ("--q-cap", "nan", "--q-cap must be a positive number"),
    ("--slots-per-node", "-1", "--slots-per-node must be >= 0"),
    ("--rates", "missing.csv", "--rates missing.csv: no such file"),
]


@pytest.mark.parametrize(
    ("flag", "value", "message"), BAD_FLAGS, ids=[f"{f} {v}" for f, v, _ in BAD_FLAGS]
)
def test_bad_flag_fails_naming_the_flag_and_leaves_no_output(
    rates: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    message: str,
) -> None:
    out = tmp_path / "plan.bin"
    argv = build_args(rates, out)
    argv[argv.index(flag) + 1] = value
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cachectl: error: {message}")
    assert err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--weights", "1,2"), "--weights lists 2 weights for 4 destinations"),
        (("--weights", "1,0,1,1"), "every weight must be a positive number"),
        (("--seed", "-1"), "--seed must be between 0"),
        (("--pool", ""), "--pool must not be empty"),
        (("--pool", "Bad Pool"), "--pool: "),  # the control plane's names.py rules
        (("--pool", "eu/west"), "--pool: "),
    ],
)
def test_bad_optional_flags_are_named(
    rates: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    assert main([*build_args(rates, tmp_path / "plan.bin"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_duplicate_node_ids_are_rejected(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = build_args(rates, tmp_path / "plan.bin")
    at = argv.index("--num-nodes")
    argv[at : at + 2] = ["--nodes", "a,b,a"]
    assert main(argv) == 2
    assert "--nodes: a listed more than once" in capsys.readouterr().err


def test_a_failed_build_leaves_the_previous_plan_untouched(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = built(rates, tmp_path)
    before = out.read_bytes()
    broken = tmp_path / "broken.csv"
    broken.write_text("key,rate\na,-1\n")
    assert main(build_args(broken, out)) == 2
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.csv", "plan.bin", "rates.csv"]


def test_out_in_a_missing_directory_is_named(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(build_args(rates, tmp_path / "no" / "plan.bin")) == 2
    assert "--out" in capsys.readouterr().err


def test_argparse_usage_errors_exit_2(rates: Path, tmp_path: Path) -> None:
    argv = build_args(rates, tmp_path / "plan.bin")
    argv[argv.index("--q-cap") + 1] = "ten"
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


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


def test_route_sends_a_cold_key_by_power_of_two_choices(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, table = built(rates, tmp_path)
    capsys.readouterr()
    result = run_json(capsys, ["plan", "route", str(out), "--key", "tenant-42", "--json"])
    assert (result["reason"], result["warm"], result["destinations"]) == ("tail", False, None)
    assert result["node"] in table.node_ids


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


@pytest.mark.parametrize("nodes", ["gpu 0,gpu-1", "_gpu,gpu-1", "gpu/0,gpu-1"])
def test_node_ids_the_control_plane_refuses_are_refused_offline(
    rates: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], nodes: str
) -> None:
    out = tmp_path / "plan.bin"
    argv = build_args(rates, out)
    at = argv.index("--num-nodes")
    argv[at : at + 2] = ["--nodes", nodes]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cachectl: error: --nodes: ") and "node id" in err
    assert not out.exists()
