"""The offline render command docs/kubernetes.md gives (issue 34: it gave none) renders the chart
with a recipe, and refuses broken values with Helm's message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ".venv/bin/python scripts/render_chart.py -f deploy/helm/recipes/alone.yaml"


def _render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_chart.py"), *args],
        cwd=ROOT, check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_documented_command_renders_the_recipe(tmp_path: Path) -> None:
    assert COMMAND in (ROOT / "docs" / "kubernetes.md").read_text()
    done = _render("-f", "deploy/helm/recipes/alone.yaml", "--namespace", "serving")
    assert done.returncode == 0, done.stderr
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "Secret"} <= kinds
    assert all(o["metadata"].get("namespace", "serving") == "serving" for o in objects)
    bad = tmp_path / "bad.yaml"
    bad.write_text("router: {replicas: many}\n")
    refused = _render("-f", str(bad))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("render_chart: ") == 1 and "replicas" in refused.stderr
