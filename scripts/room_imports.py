"""Draw the planes' rooms and the simulator's modules with the imports between them, from the code.

    .venv/bin/python scripts/room_imports.py            # print every drawing
    .venv/bin/python scripts/room_imports.py --check    # exit 1 if docs/DEVELOPING.md's are stale

Each line is one room (a module or subpackage of the package) with the rooms it imports (counts
would change with every edit; the set changes only when the structure does). The control plane's
and the data plane's rooms are listed top to bottom in their layers contract's order; the
simulator has no layers contract, so its modules are listed in an order where every import points
down (a topological order; ``acyclic_siblings`` forbids a circle). An arrow to a room higher up is
marked ``↑``: it breaks the contract, and this makes it visible.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from graphlib import TopologicalSorter
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "DEVELOPING.md"


@dataclass(frozen=True)
class Drawing:
    package: str
    marker: str  # docs/DEVELOPING.md holds the drawing between <!-- marker:begin/end -->
    layered: bool  # rooms ordered by the package's layers contract (else topologically)


DRAWINGS = (
    Drawing("controlplane", "rooms-drawing", layered=True),
    Drawing("dataplane", "dataplane-rooms-drawing", layered=True),
    Drawing("sim", "sim-modules-drawing", layered=False),
)


def contract_rooms(package: str) -> list[str]:
    """The rooms in the package's layers contract order, top first (``a | b`` listed in turn)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layered = next(c for c in contracts if c.get("containers") == [package])
    return [name.strip() for layer in layered["layers"] for name in layer.split("|")]


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def edges_of(package: str) -> tuple[set[str], Counter[tuple[str, str]]]:
    graph = grimp.build_graph(package)
    rooms = {room_of(m) for m in graph.modules} - {"", "__init__"}
    edges: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        for target in graph.find_modules_directly_imported_by(module):
            a, b = room_of(module), room_of(target)
            if a != b and a in rooms and b in rooms:
                edges[(a, b)] += 1
    return rooms, edges


def topological(rooms: set[str], edges: Counter[tuple[str, str]]) -> list[str]:
    """Importers before what they import; ties by name, so the order is stable."""
    sorter: TopologicalSorter[str] = TopologicalSorter()
    for room in sorted(rooms):
        sorter.add(room)
    for a, b in sorted(edges):
        sorter.add(b, a)  # b comes after a
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        order.extend(ready)
        sorter.done(*ready)
    return order


def drawing(spec: Drawing) -> str:
    """One line per room: ``room ──▶ other, ...``; ``↑`` marks an arrow pointing up."""
    rooms, edges = edges_of(spec.package)
    order = contract_rooms(spec.package) if spec.layered else topological(rooms, edges)
    nothing = f"(nothing in {spec.package})"
    width = max(len(r) for r in order)
    lines = []
    for room in order:
        out = sorted((order.index(b), b) for (a, b) in edges if a == room and b in order)
        arrows = ", ".join(f"{'↑ ' if i < order.index(room) else ''}{b}" for i, b in out)
        lines.append(f"{room:<{width}}  ──▶  {arrows or nothing}")
    return "\n".join(lines) + "\n"


def marked(marker: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {marker}:begin -->\n```\n)(.*?)(```\n<!-- {marker}:end -->)", re.S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/DEVELOPING.md")
    args = parser.parse_args(argv)
    text = DOC.read_text()
    stale = 0
    for spec in DRAWINGS:
        drawn = drawing(spec)
        if not args.check:
            sys.stdout.write(f"{spec.package}:\n{drawn}\n")
            continue
        found = marked(spec.marker).search(text)
        if found is None or found.group(2) != drawn:
            sys.stderr.write(f"docs/DEVELOPING.md's {spec.marker} is stale; paste:\n{drawn}")
            stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
