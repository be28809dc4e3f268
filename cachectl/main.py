"""``cachectl``: the operator CLI. Each command group lives in its own module.

Errors a user can fix (bad flags, bad files, a server saying no) print one line,
``cachectl: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cachectl import demo, load_cmd, nodes_cmd, plan_cmd, sim_cmd, status_cmd
from cachectl.errors import CliError

# Each module exposes ``register(subparsers)``; its subcommands set ``handler`` to a function
# ``(args) -> int``.
GROUPS = (plan_cmd, sim_cmd, nodes_cmd, status_cmd, load_cmd, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachectl",
        description="CacheRoute operator CLI: plans, rollouts, nodes, simulation, local demo.",
    )
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except CliError as exc:
        print(f"cachectl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cachectl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
