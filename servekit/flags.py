"""Option types and flag groups every CacheRoute server shares (see :mod:`servekit.settings`)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from servekit.logging import LEVELS
from servekit.settings import SettingsError
from servekit.tls import TlsConfig


def positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


class _FromCommandLine(list[str]):
    """Values of a repeated flag given on the command line."""


class RepeatedFlag(argparse.Action):
    """A repeatable flag whose command-line values replace (not extend) an env/config list."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        if not isinstance(current, _FromCommandLine):
            current = _FromCommandLine()
        current.append(str(values))
        setattr(namespace, self.dest, current)


def add_server_tls_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--tls-cert", type=Path, default=None, help="server certificate (PEM); enables TLS")
    add("--tls-key", type=Path, default=None, help="server private key (PEM)")
    add(
        "--tls-client-ca",
        type=Path,
        default=None,
        help="CA bundle client certificates must chain to; set to require mTLS",
    )


def server_tls(args: argparse.Namespace) -> TlsConfig | None:
    """The TLS settings of :func:`add_server_tls_flags`, or SettingsError when inconsistent."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise SettingsError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise SettingsError("--tls-client-ca needs --tls-cert and --tls-key")
    if args.tls_cert is None:
        return None
    return TlsConfig(args.tls_cert, args.tls_key, args.tls_client_ca)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` keeps the description's layout and shows every option's default."""


class _VersionAction(argparse.Action):
    """``--version``: print ``PROG VERSION`` and exit 0, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the version and exit")
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kwargs)
        self.default = argparse.SUPPRESS

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from servekit.version import package_version  # noqa: PLC0415 - slow; only when asked

        print(f"{parser.prog} {package_version()}")
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=_VersionAction)


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every server shares: log format and level, and ``--version``."""
    add = parser.add_argument
    add("--log-format", choices=("json", "console"), default="json", help="log line format")
    add("--log-level", choices=LEVELS, default="info", help="lowest level logged")
    add_version_flag(parser)
