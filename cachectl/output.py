"""Human and machine output: aligned tables for people, one JSON object for scripts.

A table cell shows control and format characters escaped (``\\n``, ``\\x00``, ``\\u202e``):
cells hold what clients claimed (an audit actor, a node address), and a newline in one printed
as a forged row of ``cachectl audit``. JSON output is escaped by JSON itself.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


def print_json(obj: Mapping[str, Any], out: TextIO | None = None) -> None:
    """One JSON object on one line (stdout by default)."""
    print(json.dumps(obj, sort_keys=True, separators=(",", ":")), file=out or sys.stdout)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = [
        all(isinstance(row[i], int | float) for row in rows) if rows else False
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO | None = None
) -> None:
    print(format_table(headers, rows), file=out or sys.stdout)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return escaped(str(value))


_UNPRINTABLE = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def escaped(text: str) -> str:
    """``text`` with every control, format or unassigned character written as an escape."""
    if text.isprintable():
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _UNPRINTABLE else c
        for c in text
    )
