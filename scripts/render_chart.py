"""Render the Helm chart offline, as ``helm template`` would, without a helm binary or a cluster.

    .venv/bin/python scripts/render_chart.py [-f VALUES.yaml ...] [--name cr] [--namespace ns]

prints every rendered manifest (a ``---`` line between them) on stdout, the chart's
values.schema.json checked first. It uses Helm's own library through ``helm-python-sdk``, a dev
extra (``make test`` installs it); with a helm binary, ``helm template cr deploy/helm/cacheroute
-f VALUES.yaml`` prints the same. A values file that breaks the schema or a template exits 2
with Helm's message (docs/kubernetes.md, "Render it offline").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "cacheroute"


def merged(files: list[Path]) -> dict[str, Any]:
    """Later files override earlier ones, key by key (Helm's -f rule)."""
    values: dict[str, Any] = {}
    for path in files:
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"render_chart: {path}: not a mapping of values")
        _merge(values, loaded)
    return values


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("-f", "--values", type=Path, action="append", default=[])
    parser.add_argument("--name", default="cr", help="release name (default: cr)")
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args(argv)
    try:
        from helm_python.chart import Chart  # noqa: PLC0415 - a dev extra
    except ImportError:
        print("render_chart: needs helm-python-sdk: run `make test` once (the dev extras)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        rendered = Chart.load(CHART).render(
            merged(args.values), name=args.name, namespace=args.namespace
        )
    except Exception as exc:  # the SDK's HelmValuesError / HelmRenderError: Helm's own message
        print(f"render_chart: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    for path, text in sorted(dict(rendered).items()):
        if path.endswith((".yaml", ".yml")) and text.strip():
            print(f"---\n# Source: {path}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
