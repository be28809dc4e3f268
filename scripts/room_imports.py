"""Draw the control plane's rooms and the imports between them, from the code.

    .venv/bin/python scripts/room_imports.py            # print the drawing
    .venv/bin/python scripts/room_imports.py --check    # exit 1 if docs/DEVELOPING.md's is stale

Each line is one room with the rooms it imports (counts would change with every edit; the set
changes only when the structure does); rooms are listed top to bottom in the contract's order, so
every arrow must point to a room further down (the contract "Control-plane rooms" enforces it;
this makes it visible).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections import Counter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "DEVELOPING.md"
MARK = re.compile(
    r"(<!-- rooms-drawing:begin -->\n```\n)(.*?)(```\n<!-- rooms-drawing:end -->)", re.S
)


def rooms() -> list[str]:
    """The rooms in the contract's order, top first (``a | b`` layers listed in turn)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layered = next(c for c in contracts if c.get("containers") == ["controlplane"])
    return [name.strip() for layer in layered["layers"] for name in layer.split("|")]


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def drawing() -> str:
    """One line per room: ``room ──▶ other, ...``; ``↑`` marks an arrow pointing up."""
    order = rooms()
    graph = grimp.build_graph("controlplane")
    edges: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        for target in graph.find_modules_directly_imported_by(module):
            a, b = room_of(module), room_of(target)
            if a != b and a in order and b in order:
                edges[(a, b)] += 1
    width = max(len(r) for r in order)
    lines = []
    for room in order:
        out = sorted((order.index(b), b) for (a, b) in edges if a == room)
        arrows = ", ".join(f"{'↑ ' if i < order.index(room) else ''}{b}" for i, b in out)
        lines.append(f"{room:<{width}}  ──▶  {arrows or '(nothing in the control plane)'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/DEVELOPING.md")
    args = parser.parse_args(argv)
    drawn = drawing()
    if not args.check:
        sys.stdout.write(drawn)
        return 0
    found = MARK.search(DOC.read_text())
    if found is None or found.group(2) != drawn:
        sys.stderr.write("docs/DEVELOPING.md's rooms drawing is stale; paste:\n" + drawn)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
