"""docs/DEVELOPING.md's layer tables say what pyproject's import contracts enforce."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "DEVELOPING.md"


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


def mismatches(text: str, linter: dict[str, Any]) -> list[str]:
    """Every way the doc's tables and the contracts disagree (empty when they agree)."""
    problems: list[str] = []
    by_layer: dict[int, set[str]] = {}
    for row in table_rows(text, "layers"):
        by_layer.setdefault(int(row[0]), set()).update(names(row[1])[:1])
    documented = [by_layer[n] for n in sorted(by_layer)]
    layered = [c for c in linter["contracts"] if c["type"] == "layers"]
    if len(layered) != 1:
        return [f"expected one layers contract, found {len(layered)}"]
    enforced = [{p.strip() for p in layer.split("|")} for layer in layered[0]["layers"]]
    if documented != enforced:
        problems.append(f"layers: the doc says {documented}, the contract says {enforced}")
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
        for ignored in layered[0].get("ignore_imports", [])
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
