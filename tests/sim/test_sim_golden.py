"""Speed work must not change results: a small steady-state study equals its checked-in output.

The values in ``golden/steady_capacity.json`` were written by the unmodified simulator (commit
4021f86, before the issue-13 speed work); every optimisation since must reproduce them exactly,
float for float. Regenerate only for an intended behaviour change (``tests/sim/golden_config.py``
says how) and say so in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.sim.golden_config import golden

GOLDEN = Path(__file__).parent / "golden" / "steady_capacity.json"


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(GOLDEN.read_text())
    return loaded


@pytest.fixture(scope="module")
def actual() -> dict[str, Any]:
    # Through JSON, as the expected values were: same float repr, tuples as lists.
    produced: dict[str, Any] = json.loads(json.dumps(golden(), sort_keys=True))
    return produced


def test_every_run_of_the_golden_study_is_bit_identical(
    expected: dict[str, Any], actual: dict[str, Any]
) -> None:
    assert sorted(actual["runs"]) == sorted(expected["runs"])
    different = [k for k in expected["runs"] if actual["runs"][k] != expected["runs"][k]]
    assert not different, {k: (expected["runs"][k], actual["runs"][k]) for k in different[:3]}


def test_the_convergence_check_is_bit_identical(
    expected: dict[str, Any], actual: dict[str, Any]
) -> None:
    assert actual["convergence"] == expected["convergence"]


def test_the_golden_study_exercises_aborts_evictions_and_every_policy(
    expected: dict[str, Any],
) -> None:
    runs = expected["runs"].values()
    assert any(r["aborted"] for r in runs) and any(not r["aborted"] for r in runs)
    assert all(r["evictions"] > 0 for r in runs)
    assert len({k.split("/")[0] for k in expected["runs"]}) == 8  # Table 1 + cacheroute_online
