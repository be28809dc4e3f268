"""Every relative link, every named results file and every source path in backticks in the docs
exists (stale links were a newcomer's first stumble, issue 12; a file named after a move, issue
21); external links are not fetched."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
RESULTS_FILE = re.compile(r"`(docs/results/[^`\s]+\.json)`")
# `controlplane/core/planner.py`, `tests/support/`: a path into the project's own top-level folders
# (no globs or placeholders; `FILE:LINE` is checked as FILE).
SOURCE_PATH = re.compile(
    r"`((?:agents|bench|cacheroute_state|cachectl|controlplane|dataplane|deploy|docs|proto|scripts"
    r"|servekit|sim|simengine|tests)/[A-Za-z0-9_./-]*)(?::\d+)?`"
)


def targets(doc: Path) -> list[Path]:
    text = doc.read_text()
    found = []
    for match in LINK.finditer(text):
        target = match.group(1).split("#", 1)[0]
        if target and not target.startswith(("http://", "https://", "mailto:")):
            found.append((doc.parent / target).resolve())
    found += [ROOT / name for name in RESULTS_FILE.findall(text)]
    found += [ROOT / name for name in SOURCE_PATH.findall(text)]
    return list(dict.fromkeys(found))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    missing = [os.path.relpath(t, ROOT) for t in targets(doc) if not t.exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


def test_the_checker_sees_links_and_results_files(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "[a](gone.md) [b](https://example.com) [c](#top) `docs/results/none.json` "
        "`sim/gone.py` `controlplane/core/` `sim/*.py` `python -m sim`"
    )
    assert [t.name for t in targets(doc)] == ["gone.md", "none.json", "gone.py", "core"]
