"""``cachectl plan ...`` (placeholder until the offline plan commands land)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("plan", help="build and inspect plans")
    parser.add_subparsers(dest="plan_command", metavar="SUBCOMMAND", required=True)
