"""`cachectl`: the operator CLI. Each command group lives in its own module.

Errors a user can fix (bad flags, bad files, a server saying no) print one line,
`cachectl: error: ...`, and exit with status 2. A closed output pipe (`cachectl ... | head`)
ends quietly; Ctrl-C prints one line and exits 130.

Conventions every command follows:

* connection and output flags (`GLOBAL_OPTIONS`: `--target`, `--timeout`, the TLS flags,
  `--token-file`, `--actor`, `--json`) go before or after the command, as with kubectl or gh:
  `cachectl --target H:P status` is `cachectl status --target H:P`;
* `--json` prints one JSON object on stdout (64-bit integers as strings, as in the proto3 JSON
  mapping the online commands use); `--out FILE` writes a file;
* start-up is lazy: only the chosen group's module is imported, so `--help` and the offline
  commands do not pay for gRPC, numpy, aiohttp or matplotlib they do not use.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cachectl.errors import CliError

# name -> (module, one-line help). Each module exposes ``register(subparsers)``; its subcommands
# set ``handler`` to a function ``(args) -> int``.
GROUPS: dict[str, tuple[str, str]] = {
    "plan": ("cachectl.plan_cmd", "build and inspect plans"),
    "sim": ("cachectl.sim_cmd", "simulate policies on workloads"),
    "nodes": ("cachectl.nodes_cmd", "list, add, remove, drain nodes"),
    "status": ("cachectl.status_cmd", "active plans, router ACK/NACKs, nodes"),
    "audit": ("cachectl.audit_cmd", "who did what, when (the audit trail)"),
    "profile": ("cachectl.profile_cmd", "fit an engine profile to the pool's own telemetry"),
    "knee": ("cachectl.knee_cmd", "find one engine's knee (its q_cap) with the load generator"),
    "load": ("cachectl.load_cmd", "replay a workload through Route against a running cluster"),
    "demo": (
        "cachectl.demo",
        "run a local cluster: Flat-LB, then a CacheRoute plan, side by side",
    ),
}
# Flags accepted before the command too; True when the flag takes a value.
GLOBAL_OPTIONS: dict[str, bool] = {
    "--target": True,
    "--timeout": True,
    "--tls-ca": True,
    "--tls-cert": True,
    "--tls-key": True,
    "--token-file": True,
    "--actor": True,
    "--json": False,
}


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move the global options found before the command to after it (argparse reads them
    there, on the subcommand's own parser)."""
    moved: list[str] = []
    rest = list(argv)
    i = 0
    while i < len(rest):
        token = rest[i]
        name = token.split("=", 1)[0]
        if not token.startswith("--") or name not in GLOBAL_OPTIONS:
            break
        takes_value = GLOBAL_OPTIONS[name] and "=" not in token
        width = 2 if takes_value and i + 1 < len(rest) else 1
        moved.extend(rest[i : i + width])
        del rest[i : i + width]
    return [*rest, *moved] if moved else rest


def _version() -> str:
    from servekit.version import package_version  # noqa: PLC0415 - importlib.metadata is slow

    return f"cachectl {package_version()}"


class _Version(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help="print the version")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version())
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` a parser where just that group is registered (the
    others are named with their help, but their modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog="cachectl",
        description="CacheRoute operator CLI: plans, rollouts, nodes, simulation, local demo.",
        epilog="Connection and output flags (--target, --timeout, --tls-*, --token-file, "
        "--actor, --json) may also come before COMMAND. Each command's --help lists its own "
        "flags with their defaults.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for name, (module, help_text) in GROUPS.items():
        if only is None or only == name:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_text)
    _plain_help(parser)
    return parser


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help texts come partly from docstrings: show ``code`` markup as `code`."""
    parser.description = parser.description and parser.description.replace("``", "`")
    for action in parser._actions:
        if action.help:
            action.help = action.help.replace("``", "`")
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = choice.help and choice.help.replace("``", "`")
            for child in action.choices.values():
                _plain_help(child)


def _chosen_group(argv: Sequence[str]) -> str:
    for token in argv:
        if not token.startswith("-"):
            return token if token in GROUPS else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    args_in = hoist_global_options(sys.argv[1:] if argv is None else argv)
    if "--version" in args_in[:1]:
        print(_version())
        return 0
    parser = build_parser(only=_chosen_group(args_in))
    try:
        args = parser.parse_args(args_in)
        return int(args.handler(args))
    except CliError as exc:
        print(f"cachectl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cachectl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_closed_stdout()
        return 0


def _quiet_closed_stdout() -> None:
    """The reader went away (`| head`): point stdout at /dev/null so the interpreter's final
    flush does not print a BrokenPipeError traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
