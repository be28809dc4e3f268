"""Every relative link and every named results file in the docs exists (stale links were a
newcomer's first stumble, issue 12); external links are not fetched."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
RESULTS_FILE = re.compile(r"`(docs/results/[^`\s]+\.json)`")


def targets(doc: Path) -> list[Path]:
    text = doc.read_text()
    found = []
    for match in LINK.finditer(text):
        target = match.group(1).split("#", 1)[0]
        if target and not target.startswith(("http://", "https://", "mailto:")):
            found.append((doc.parent / target).resolve())
    found += [ROOT / name for name in RESULTS_FILE.findall(text)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    missing = [os.path.relpath(t, ROOT) for t in targets(doc) if not t.exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def test_the_checker_sees_links_and_results_files(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("[a](gone.md) [b](https://example.com) [c](#top) `docs/results/none.json`")
    assert [t.name for t in targets(doc)] == ["gone.md", "none.json"]
