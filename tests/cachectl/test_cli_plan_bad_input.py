"""``cachectl plan build`` offline on bad input: one line naming the fault, and no output."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachectl.main import main
from tests.support.plan_cli import build_args, built, rates

__all__ = ["rates"]  # the fixture

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
