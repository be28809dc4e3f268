"""Read a rates file (CSV ``key,rate``) into planner input, with errors that name the line.

The file is an operator's hand-made or exported list, so every problem is reported the way an
editor would want it: ``RATES:LINE: what is wrong``. A key is an opaque identifier the router
hashes exactly as callers send it, so the reader refuses what would silently plan a key no caller
sends (issue 34) rather than guess: spaces around a key or a rate (``" acme "`` is not
``acme``), a key starting with ``#`` (a comment line would become a warm key; the format has no
comments), and a key starting with ``~`` (reserved for the keys routers derive from prompts,
``~d1.…``, which only live rates can plan). Rates are requests/s written as plain decimal numbers
(``1000``, ``2.5``, ``1e3``; not ``1_000`` or ``0x10``), finite and ≥ 0. Blank lines are skipped.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cachectl.errors import CliError
from dataplane.core.keys import InvalidKeyError, hash_key, validate_key
from dataplane.core.table import F64Array, U64Array

HEADER = ("key", "rate")
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
RESERVED_STARTS = {
    "#": "starts with '#', but a rates file has no comments: delete the line",
    "~": "starts with '~', reserved for the keys routers derive from prompts (~d1.…), which only "
    "a live build plans (cachectl plan build without --rates)",
}


@dataclass(frozen=True)
class Rates:
    """Per-key rates aligned with their hashes, and each hash's key text (for labels)."""

    key_hashes: U64Array
    rates: F64Array
    labels: dict[int, str]


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CliError(f"--rates {path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"--rates {path}: is a directory, not a file") from None
    except OSError as exc:
        raise CliError(f"--rates {path}: cannot read: {exc.strerror}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CliError(f"{path}:{line}: not valid UTF-8 text") from None


def _check_key(key: str, where: str) -> None:
    try:
        validate_key(key)
    except InvalidKeyError as exc:
        raise CliError(f"{where}: {exc}") from None
    if key != key.strip():
        raise CliError(
            f"{where}: key {key!r} has spaces around it; keys are matched byte for byte, so "
            f"write {key.strip()!r} (or, if the spaces are really part of the key, rename it)"
        )
    for start, why in RESERVED_STARTS.items():
        if key.startswith(start):
            raise CliError(f"{where}: key {key!r} {why}")


def _parse_rate(text: str, where: str) -> float:
    if text != text.strip():
        raise CliError(f"{where}: rate {text!r} has spaces around it; write {text.strip()!r}")
    try:
        rate = float(text)
    except ValueError:
        raise CliError(f"{where}: rate {text!r} is not a number") from None
    if not math.isfinite(rate):
        raise CliError(f"{where}: rate {text!r} is not finite")
    if not PLAIN_NUMBER.fullmatch(text):
        raise CliError(
            f"{where}: rate {text!r} is not a plain decimal number (digits, one '.', an optional "
            "exponent: 1000, 2.5, 1e3)"
        )
    if rate < 0:
        raise CliError(f"{where}: rate {text!r} is negative")
    return rate


def _check_header(row: list[str], where: str) -> None:
    names = tuple(cell.strip().lower() for cell in row)
    if names == HEADER:
        return
    shown = ",".join(row)
    if len(row) == 2:
        try:
            float(row[1])
        except ValueError:
            pass
        else:
            raise CliError(f"{where}: missing header: the first line must be 'key,rate'")
    raise CliError(f"{where}: header must be 'key,rate' (two columns), got {shown!r}")


def read_rates(path: Path) -> Rates:
    """Parse ``path``; raise :class:`CliError` naming the file and line of the first problem."""
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    hashes: list[int] = []
    rates: list[float] = []
    first_line: dict[int, int] = {}  # key hash -> line it was first seen on
    labels: dict[int, str] = {}
    header_seen = False
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if not row:
                continue
            if not header_seen:
                _check_header(row, where)
                header_seen = True
                continue
            if len(row) != 2:
                raise CliError(f"{where}: expected 2 fields (key,rate), got {len(row)}")
            key, rate_text = row
            _check_key(key, where)
            rate = _parse_rate(rate_text, where)
            key_hash = hash_key(key)
            if key_hash in first_line:
                other = labels[key_hash]
                if other == key:
                    raise CliError(
                        f"{where}: duplicate key {key!r} (also on line {first_line[key_hash]})"
                    )
                raise CliError(
                    f"{where}: key {key!r} has the same 64-bit hash as {other!r} on line "
                    f"{first_line[key_hash]}; rename one of them"
                )
            first_line[key_hash] = reader.line_num
            labels[key_hash] = key
            hashes.append(key_hash)
            rates.append(rate)
    except csv.Error as exc:
        raise CliError(f"{path}:{reader.line_num}: {exc}") from None
    if not header_seen:
        raise CliError(f"{path}: file is empty; expected a 'key,rate' header and one key per line")
    if not hashes:
        raise CliError(f"{path}: no keys after the 'key,rate' header")
    return Rates(np.array(hashes, dtype=np.uint64), np.array(rates, dtype=np.float64), labels)
