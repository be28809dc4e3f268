"""What an installed wheel needs ships inside the packages; the CLI starts fast (issue 10)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.workloads.arrivals import AZURE_CONV, ArrivalProcess, azure_gaps

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_bootstrap_gaps_live_inside_the_sim_package() -> None:
    package = Path(sim.__file__).resolve().parent
    assert AZURE_CONV.is_relative_to(package) and AZURE_CONV.is_file()
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "sim" in wheel["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    gaps = azure_gaps(AZURE_CONV)
    assert len(gaps) == 19_365 and float(gaps.std() / gaps.mean()) == pytest.approx(1.09, abs=0.01)
    times = ArrivalProcess("bootstrap").times(np.random.default_rng(1), 50.0, 20.0)
    assert len(times) / 20.0 == pytest.approx(50.0, rel=0.2)


@pytest.mark.traces
def test_the_packaged_gaps_are_exactly_the_traces(traces_dir: Path) -> None:
    assert np.array_equal(
        azure_gaps(AZURE_CONV), azure_gaps(traces_dir / "azure_llm_2023_conv.csv")
    )


def test_cli_help_and_offline_commands_import_no_grpc_aiohttp_matplotlib_or_redis(
    tmp_path: Path,
) -> None:
    """The start-up budget (< 0.3 s) comes from not importing what a command does not use; the
    timing itself is in docs/benchmarks.md, not asserted here."""
    rates = tmp_path / "rates.csv"
    rates.write_text("key,rate\na,4\nb,2\n")
    plan = tmp_path / "plan.bin"
    probe = (
        "import sys\n"
        "from cachectl.main import main\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "finally:\n"
        "    heavy = [m for m in ('grpc', 'aiohttp', 'matplotlib', 'redis') if m in sys.modules]\n"
        "    print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    for argv in (
        ["--help"],
        ["plan", "build", "--rates", str(rates), "--nodes", "a,b", "--q-cap", "5",
         "--slots-per-node", "1", "--out", str(plan)],
        ["plan", "route", str(plan), "--key", "a"],
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            check=False, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "HEAVY=\n" in done.stderr, (argv, done.stderr)
