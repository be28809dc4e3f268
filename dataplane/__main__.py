"""``python -m dataplane``: run one stateless router until SIGTERM/SIGINT.

Options come from flags, ``CACHEROUTE_*`` environment variables or ``--config FILE.yaml``
(declared once in ``OPTIONS``, see ``servekit.options``); ``--help`` lists them all with their
defaults and variables.
"""

from __future__ import annotations

from servekit.blas import limit_blas_threads
from servekit.startup_gc import freeze_startup, pause_for_startup

limit_blas_threads()  # first: numpy, imported below, reads it once
if __name__ == "__main__":
    pause_for_startup()  # until the server serves (servekit/startup_gc.py)

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence

import structlog

from dataplane.options import OPTIONS
from dataplane.options.builder import config_from
from dataplane.server import RouterConfig, RouterServer
from servekit.flags import LOG_FORMAT, LOG_LEVEL, add_version_flag
from servekit.logging import configure_logging
from servekit.options import SettingsError
from servekit.signals import run_until_signal

# config_from lives in dataplane.options.builder; it stays importable from here.
__all__ = ["build_parser", "config_from", "main", "parse_args", "serve"]


def build_parser() -> argparse.ArgumentParser:
    parser = OPTIONS.parser(
        prog="python -m dataplane",
        description="CacheRoute router: answers Route/RouteBatch from the active routing table.",
    )
    add_version_flag(parser)
    return parser


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """Flags > ``CACHEROUTE_*`` > ``--config`` YAML; SettingsError names a bad env/file value."""
    return OPTIONS.parse(build_parser(), argv, environ)


async def serve(config: RouterConfig) -> None:
    server = RouterServer(config)
    await server.start()
    # What start-up built (modules, gRPC, the first tables) lives as long as the process; full
    # collections walking it again would pause the serving thread for milliseconds.
    freeze_startup()
    await run_until_signal(server.stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = OPTIONS.parse(parser, argv)
        config = config_from(args)
    except SettingsError as exc:
        parser.error(str(exc))
    configure_logging(
        "dataplane", json=LOG_FORMAT.value(args) == "json", level=LOG_LEVEL.value(args)
    )
    try:
        asyncio.run(serve(config))
    except (OSError, ValueError) as exc:
        structlog.get_logger("dataplane").error("router failed to start", error=str(exc))
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were set
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
