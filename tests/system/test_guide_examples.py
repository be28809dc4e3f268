"""The Python examples in docs/GUIDE.md type-check against the code (mypy --strict, the project's
settings): an example that names a moved module or a wrong signature fails here (issue 21)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "GUIDE.md"
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)


def examples(text: str) -> list[str]:
    """Each ```python block, dedented by its fence's indent."""
    blocks = []
    for indent, body in BLOCK.findall(text):
        lines = body.splitlines()
        blocks.append("\n".join(line.removeprefix(indent) for line in lines) + "\n")
    return blocks


def type_errors(source: str, workdir: Path) -> str:
    """mypy's report on ``source`` as one module, empty when it type-checks."""
    module = workdir / "guide_example.py"
    module.write_text(source)
    out, err, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(module),
        ]
    )
    return "" if status == 0 else out + err


def test_the_guide_has_examples() -> None:
    assert examples(GUIDE.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(examples(GUIDE.read_text()))))
def test_each_guide_example_type_checks(index: int, tmp_path: Path) -> None:
    source = examples(GUIDE.read_text())[index]
    assert type_errors(source, tmp_path) == ""


@pytest.mark.slow
def test_a_wrong_example_is_caught(tmp_path: Path) -> None:
    source = "from controlplane.lifecycle.plans import list_plans\n\nlist_plans(1, 2, 3)\n"
    assert "list_plans" in type_errors(source, tmp_path)
