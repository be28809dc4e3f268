"""The sizes a live build's byte-aware admission uses: configured, else reported, else filled."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from controlplane.config import parse_config
from controlplane.core.live_sizes import load_sizes_file, plan_sizes


def test_configured_wins_reported_is_floored_and_the_rest_get_the_median() -> None:
    hashes = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
    labels = {1: "a", 2: "b", 3: "c", 4: "d", 5: "e"}
    reported = {1: 40.0, 2: 0.2, 4: 10.0}
    got = plan_sizes(hashes, labels, reported, {"a": 900.0, "c": 30.0})
    assert got is not None
    assert got.sizes.tolist() == [900.0, 1.0, 30.0, 10.0, 20.0]  # e: median of 900, 1, 30, 10
    assert (got.configured, got.reported, got.filled) == (2, 2, 1)


def test_with_no_size_known_the_build_keeps_equal_slots() -> None:
    hashes = np.array([1, 2], dtype=np.uint64)
    assert plan_sizes(hashes, {1: "a"}, {}, {"zz": 5.0}) is None


def test_a_sizes_file_is_read_and_bad_ones_name_the_problem(tmp_path: Path) -> None:
    good = tmp_path / "sizes.json"
    good.write_text('{"tenant-a": 120, "tenant-b": 2.5}')
    assert load_sizes_file(str(good)) == (("tenant-a", 120.0), ("tenant-b", 2.5))
    assert load_sizes_file("") == ()
    cases = {"[1, 2]": "JSON object", '{"k": "x"}': "not a number", '{"k": 0}': "must be > 0"}
    for text, message in cases.items():
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            load_sizes_file(str(bad))
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read"):
        load_sizes_file(str(tmp_path / "missing.json"))


def test_the_control_plane_flags_turn_byte_aware_live_builds_on(tmp_path: Path) -> None:
    sizes = tmp_path / "sizes.json"
    sizes.write_text('{"tenant-a": 120}')
    config = parse_config(["--cache-budget", "4096", "--prefix-sizes", str(sizes)], {})
    assert config.cache_budget == 4096 and config.byte_rank == "best"
    assert config.prefix_sizes == {"tenant-a": 120.0}
    assert parse_config([], {}).cache_budget == 0 and parse_config([], {}).prefix_sizes == {}
