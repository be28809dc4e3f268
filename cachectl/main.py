"""`cachectl`: the operator CLI. Each command group lives in its own module.

Errors a user can fix (bad flags, bad files, a server saying no) print one line,
`cachectl: error: ...`, and exit with status 2; a move the rollout gates refused exits 1
(`cachectl.errors`, docs/operations.md "Exit codes"). A closed output pipe (`cachectl ... |
head`) ends quietly; Ctrl-C prints one line and exits 130.

Conventions every command follows:

* connection and output flags (`GLOBAL_OPTIONS`: `--target`, `--timeout`, the TLS flags,
  `--token-file`, `--actor`, `--json`) go before, between or after the command's words, as with
  kubectl or gh: `cachectl --target H:P plan list`, `cachectl plan --target H:P list` and
  `cachectl plan list --target H:P` are one command; every command that can read the control
  plane accepts them (`plan route` and `plan diff` too: they take a stored version);
* `--json` prints one JSON object on stdout (64-bit integers as strings, as in the proto3 JSON
  mapping the online commands use); `--out FILE` writes a file;
* start-up is lazy: only the chosen group's module is imported, so `--help` and the offline
  commands do not pay for gRPC, numpy, aiohttp or matplotlib they do not use.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence

from cachectl.errors import EXIT_CODES, INTERRUPTED, USAGE_OR_REFUSED, CliError
from servekit.blas import limit_blas_threads

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


SPHINX_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc):`")
COMMAND_WORDS = 2  # a group and its subcommand: `plan list`, `nodes add`


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move the global options found before or between the command's words (``cachectl
    --target X plan list``, ``cachectl plan --target X list``) to after them: argparse reads them
    on the subcommand's own parser. The scan stops at the first other option or the first word
    after the command's, so no option's value is ever taken for a global option."""
    moved: list[str] = []
    words: list[str] = []
    rest = list(argv)
    while rest:
        token = rest[0]
        name = token.split("=", 1)[0]
        if token.startswith("--") and name in GLOBAL_OPTIONS:
            takes_value = GLOBAL_OPTIONS[name] and "=" not in token
            width = 2 if takes_value and len(rest) > 1 else 1
            moved.extend(rest[:width])
            del rest[:width]
        elif not token.startswith("-") and len(words) < COMMAND_WORDS:
            words.append(rest.pop(0))
        else:
            break
    return [*words, *rest, *moved]


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
        "--actor, --json) may also come before or between the command's words. Each command's "
        f"--help lists its own flags with their defaults. {EXIT_CODES[0].upper()}"
        f"{EXIT_CODES[1:]}.",
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


def _plain(text: str) -> str:
    """Sphinx markup as a terminal shows code: ``x`` and :mod:`x` both as `x`."""
    return SPHINX_ROLE.sub("`", text.replace("``", "`"))


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Help texts come partly from docstrings: show their markup plainly (:func:`_plain`)."""
    parser.description = parser.description and _plain(parser.description)
    for action in parser._actions:
        if action.help:
            action.help = _plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = choice.help and _plain(choice.help)
            for child in action.choices.values():
                _plain_help(child)


def _chosen_group(argv: Sequence[str]) -> str:
    for token in argv:
        if not token.startswith("-"):
            return token if token in GROUPS else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    limit_blas_threads()  # before a command imports numpy (servekit/blas.py)
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
        return USAGE_OR_REFUSED
    except KeyboardInterrupt:
        print("cachectl: interrupted", file=sys.stderr)
        return INTERRUPTED
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
