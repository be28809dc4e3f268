"""docs/DEVELOPING.md's layer tables say what pyproject's import contracts enforce."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "DEVELOPING.md"
ROOMS = {"controlplane": "rooms", "dataplane": "dataplane-rooms"}  # package -> the doc's table


def contracts() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    linter: dict[str, Any] = config["tool"]["importlinter"]
    return linter


def table_rows(text: str, marker: str) -> list[list[str]]:
    """The body rows of the table between ``<!-- marker:begin -->`` and ``:end``, as cells."""
    found = re.search(rf"<!-- {marker}:begin -->(.*?)<!-- {marker}:end -->", text, re.S)
    if found is None:
        return []
    lines = [line.strip() for line in found.group(1).strip().splitlines()]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return rows[2:]  # header and rule


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def documented_layers(text: str, marker: str) -> list[set[str]]:
    """The table's rows grouped by layer number, top first; each row's modules are its
    backticked names (the packages table names one a row, the rooms table may name several)."""
    by_layer: dict[int, set[str]] = {}
    for row in table_rows(text, marker):
        found = names(row[1])
        by_layer.setdefault(int(row[0]), set()).update(found if marker != "layers" else found[:1])
    return [by_layer[n] for n in sorted(by_layer)]


def enforced_layers(contract: dict[str, Any]) -> list[set[str]]:
    """A layers contract's layers as full module names (a container prefixes its layers)."""
    prefix = f"{contract['containers'][0]}." if contract.get("containers") else ""
    return [{prefix + p.strip() for p in layer.split("|")} for layer in contract["layers"]]


def mismatches(text: str, linter: dict[str, Any]) -> list[str]:
    """Every way the doc's tables and the contracts disagree (empty when they agree)."""
    problems: list[str] = []
    layered = [c for c in linter["contracts"] if c["type"] == "layers"]
    packages = [c for c in layered if not c.get("containers")]
    if len(packages) != 1 or len(layered) != 1 + len(ROOMS):
        return [f"expected one package and {len(ROOMS)} room layers contracts, found {layered}"]
    documented = documented_layers(text, "layers")
    if documented != enforced_layers(packages[0]):
        problems.append(
            f"layers: the doc says {documented}, the contract says {enforced_layers(packages[0])}"
        )
    for package, marker in ROOMS.items():
        rooms = [c for c in layered if c.get("containers") == [package]]
        if len(rooms) != 1:
            problems.append(f"{marker}: no single layers contract for {package}")
            continue
        documented_rooms = documented_layers(text, marker)
        if documented_rooms != enforced_layers(rooms[0]):
            problems.append(
                f"{marker}: the doc says {documented_rooms}, "
                f"the contract says {enforced_layers(rooms[0])}"
            )
    missing = set(linter["root_packages"]) - set().union(*documented)
    if missing:
        problems.append(f"root packages missing from the layer table: {sorted(missing)}")
    doc_forbidden = {
        row[0]: (set(names(row[1])), set(names(row[2]))) for row in table_rows(text, "forbidden")
    }
    enforced_forbidden = {
        c["name"]: (set(c["source_modules"]), set(c["forbidden_modules"]))
        for c in linter["contracts"]
        if c["type"] == "forbidden"
    }
    if doc_forbidden != enforced_forbidden:
        problems.append(
            f"forbidden imports: the doc says {doc_forbidden}, the contracts say "
            f"{enforced_forbidden}"
        )
    problems.extend(
        f"the allowed exception {ignored!r} is not documented"
        for ignored in packages[0].get("ignore_imports", [])
        if f"`{ignored}`" not in text
    )
    return problems


def test_the_layout_tables_match_the_import_contracts() -> None:
    assert mismatches(DOC.read_text(), contracts()) == []


def test_a_layer_moved_in_the_doc_alone_is_caught() -> None:
    text = DOC.read_text().replace("| 4 | `sim` |", "| 6 | `sim` |")
    assert any(p.startswith("layers:") for p in mismatches(text, contracts()))


def test_a_forbidden_import_dropped_from_a_contract_alone_is_caught() -> None:
    linter = contracts()
    for contract in linter["contracts"]:
        if contract["type"] == "forbidden":
            contract["forbidden_modules"] = contract["forbidden_modules"][1:]
    assert any(p.startswith("forbidden imports:") for p in mismatches(DOC.read_text(), linter))


def test_an_undocumented_package_is_caught() -> None:
    linter = contracts()
    linter["root_packages"] = [*linter["root_packages"], "newpkg"]
    assert any("newpkg" in p for p in mismatches(DOC.read_text(), linter))


def test_a_room_moved_in_the_doc_alone_is_caught() -> None:
    text = DOC.read_text().replace("| 8 | `controlplane.core` |", "| 5 | `controlplane.core` |")
    assert any(p.startswith("rooms:") for p in mismatches(text, contracts()))


def test_a_data_plane_room_moved_in_the_doc_alone_is_caught() -> None:
    text = DOC.read_text().replace("| 6 | `dataplane.telemetry` |", "| 4 | `dataplane.telemetry` |")
    assert any(p.startswith("dataplane-rooms:") for p in mismatches(text, contracts()))


@pytest.mark.parametrize("package", sorted(ROOMS))
def test_every_module_of_a_plane_sits_in_a_room(package: str) -> None:
    """A new top-level module or room must be added to the rooms contract (and so to the doc)."""
    rooms = next(c for c in contracts()["contracts"] if c.get("containers") == [package])
    listed = set().union(*enforced_layers(rooms))
    present = {
        f"{package}.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / package).iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert present == listed
