"""``cachectl plan build`` offline: the plan file it writes and the summary it prints.

Bad input is tests/cachectl/test_cli_plan_bad_input.py; ``show``, ``route`` and the real
console entry tests/cachectl/test_cli_plan_show_route.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cachectl.main import main
from dataplane.core.keys import hash_key
from dataplane.core.table_codec import decode_table
from tests.support.plan_cli import RATES, build_args, built, rates, run_json

__all__ = ["rates"]  # the fixture

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
