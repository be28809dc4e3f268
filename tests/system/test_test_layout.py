"""No test module imports another (issue 12): shared helpers live in tests/support/, shared
fixtures in a conftest.py, so a test file can be read, moved or deleted on its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_test_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [n for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path))
    }
    assert not offenders, f"import helpers from tests/support instead: {offenders}"


def test_the_check_sees_both_import_forms(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "from tests.a.test_b import c\nimport tests.test_d\nfrom tests.support import e\n"
    )
    assert imported_test_modules(module) == ["tests.a.test_b", "tests.test_d"]
