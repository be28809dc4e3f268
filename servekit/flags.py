"""Option types and the option groups every CacheRoute server shares (:mod:`servekit.options`)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from servekit.logging import LEVELS
from servekit.options import Option, SettingsError
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


def fraction(text: str) -> float:
    """A probability or share: a number in [0, 1]."""
    value = float(text)
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
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


def optional_path(text: str) -> Path | None:
    """A file path; empty text (``CACHEROUTE_TLS_CERT=``) means none."""
    return Path(text) if text else None


LOG_FORMAT = Option("log_format", "json", str, "log line format", choices=("json", "console"))
LOG_LEVEL = Option("log_level", "info", str, "lowest level logged", choices=tuple(LEVELS))
LOG_OPTIONS = (LOG_FORMAT, LOG_LEVEL)

TLS_CERT: Option[Path | None] = Option(
    "tls_cert", None, optional_path, "server certificate (PEM); enables TLS"
)
TLS_KEY: Option[Path | None] = Option("tls_key", None, optional_path, "server private key (PEM)")
TLS_CLIENT_CA: Option[Path | None] = Option(
    "tls_client_ca", None, optional_path,
    "CA bundle client certificates must chain to; set to require mTLS",
)  # fmt: skip
SERVER_TLS_OPTIONS = (TLS_CERT, TLS_KEY, TLS_CLIENT_CA)


def server_tls(args: argparse.Namespace) -> TlsConfig | None:
    """The TLS settings of :data:`SERVER_TLS_OPTIONS`, or SettingsError when inconsistent."""
    cert, key, client_ca = TLS_CERT.value(args), TLS_KEY.value(args), TLS_CLIENT_CA.value(args)
    if (cert is None) != (key is None):
        raise SettingsError("--tls-cert and --tls-key go together")
    if client_ca is not None and cert is None:
        raise SettingsError("--tls-client-ca needs --tls-cert and --tls-key")
    if cert is None or key is None:
        return None
    return TlsConfig(cert, key, client_ca)


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
